module github.com/idemkit/idem/cmd/idem-server

go 1.26

require github.com/idemkit/idem v0.0.0

require github.com/google/uuid v1.6.0 // indirect

replace github.com/idemkit/idem => ../..
