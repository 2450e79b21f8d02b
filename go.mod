module github.com/idemkit/idem

go 1.26

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/google/uuid v1.6.0
	github.com/jarcoal/httpmock v1.4.2
)
