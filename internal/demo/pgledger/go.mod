module github.com/idemkit/idem/internal/demo/pgledger

go 1.26

require (
	github.com/idemkit/idem v0.1.0
	github.com/idemkit/idem/server/pgstore v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
)
