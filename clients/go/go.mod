module rmq/clients/go

go 1.19
