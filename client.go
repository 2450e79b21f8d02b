package idem

import "net/http"

// NewClient returns an http.Client whose Transport is NewTransport(nil, opts...):
// it retries safely through http.DefaultTransport. Redirects, cookies and
// Client.Timeout work as usual; each redirect hop is an operation of its own.
func NewClient(opts ...Option) *http.Client {
	return &http.Client{Transport: NewTransport(nil, opts...)}
}
