module github.com/idemkit/idem/cmd/idem-check

go 1.26.0

require github.com/idemkit/idem v0.1.0

require github.com/google/uuid v1.6.0 // indirect
