package rmq

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is what the server answered with an error status, or a failure to
// reach it: its Kind is the server's (the library's ErrorKind, or
// Unauthorized, ReadOnly, NotFound, ...), or "ConnectionFailed".
type Error struct {
	// Status is the HTTP status (0 when the server could not be reached).
	Status  int
	Kind    string
	Message string
	// Err is the transport error, when the server could not be reached.
	Err error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Kind, e.Message)
	}
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Kind, e.Message, e.Status)
}

func (e *Error) Unwrap() error { return e.Err }

// Sentinel errors to test with errors.Is: each matches an *Error of its
// status.
var (
	// ErrBadRequest: 400, the request was refused as it is; nothing was done.
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized: 401, the bearer token is missing or wrong.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: 403, the server is read-only.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: 404, no such topic (or route).
	ErrNotFound = errors.New("not found")
	// ErrConflict: 409, the request conflicts with the topic as it is.
	ErrConflict = errors.New("conflict")
	// ErrTooManyRequests: 429, too many expensive readings at once.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrUnavailable: 503, Redis is unreachable or a bounded topic is full.
	ErrUnavailable = errors.New("unavailable")
	// ErrConnectionFailed: the server could not be reached.
	ErrConnectionFailed = errors.New("connection failed")
)

// Is matches the sentinel of the error's status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrTooManyRequests:
		return e.Status == http.StatusTooManyRequests
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	case ErrConnectionFailed:
		return e.Status == 0
	}
	return false
}

// fatal: an error that will not go away by asking again.
func fatal(err error) bool {
	return errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrBadRequest)
}
