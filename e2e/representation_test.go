package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/gorilla/mux"
	"github.com/klauspost/compress/gzhttp"

	"github.com/idemkit/idem/internal/testkit/adaptertest"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// document answers 201 with the representation scenarios' Document.
var document = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", adaptertest.DocumentETag)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(adaptertest.Document)
})

// Regression (issue 27, item 7): gzhttp, net/http's most used compression
// middleware, inside server.Middleware was recorded compressed and replayed
// without its Content-Encoding; with Content-Encoding allow-listed, in gzip
// to a retry that had not asked for it. Over net/http's ServeMux and chi.
func TestCompressionInsideMiddlewareIsReplayedInAnAcceptedEncoding(t *testing.T) {
	for name, opts := range map[string][]server.Option{
		"default_headers":          nil,
		"content_encoding_allowed": {server.WithStoredHeaders("Content-Encoding", "Vary")},
	} {
		t.Run(name+"/servemux", func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle("POST /doc", server.Middleware(memstore.New(), opts...)(gzhttp.GzipHandler(document)))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			adaptertest.CheckCompressedReplays(t, srv, "/doc")
		})
		t.Run(name+"/chi", func(t *testing.T) {
			r := chi.NewRouter()
			gzip := func(h http.Handler) http.Handler { return gzhttp.GzipHandler(h) }
			r.With(server.Middleware(memstore.New(), opts...), gzip).Post("/doc", document)
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			adaptertest.CheckCompressedReplays(t, srv, "/doc")
		})
	}
}

// In front of server.Middleware (the order docs/frameworks.md advises), the
// compression middleware encodes each answer for its own request: chi's own
// middleware.Compress in front of a chi route, gzhttp on gorilla/mux's root
// router in front of the subrouter's idempotency middleware.
func TestCompressionInFrontOfMiddleware(t *testing.T) {
	t.Run("chi", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(middleware.Compress(5))
		r.With(server.Middleware(memstore.New())).Post("/doc", document)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		adaptertest.CheckCompressedInFront(t, srv, "/doc")
	})
	t.Run("gorilla_mux", func(t *testing.T) {
		r := mux.NewRouter()
		r.Use(func(h http.Handler) http.Handler { return gzhttp.GzipHandler(h) })
		sub := r.PathPrefix("/doc").Subrouter()
		sub.Use(server.Middleware(memstore.New()))
		sub.Handle("", document).Methods(http.MethodPost)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		adaptertest.CheckCompressedInFront(t, srv, "/doc")
	})
}

// chi's own middleware.Compress inside server.Middleware: offered gzip and
// deflate only, it answers in one of them, which replays can undo.
func TestChiCompressInsideMiddleware(t *testing.T) {
	r := chi.NewRouter()
	r.With(server.Middleware(memstore.New()), middleware.Compress(5)).Post("/doc", document)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	adaptertest.CheckCompressedReplays(t, srv, "/doc")
}
