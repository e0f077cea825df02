module rmq/examples/go

go 1.19

require rmq/clients/go v0.0.0

replace rmq/clients/go => ../../clients/go
