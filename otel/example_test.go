package idemotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem"
	idemotel "github.com/idemkit/idem/otel"
	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/memstore"
)

// The server's metrics, read here from an in-memory reader; a service would
// give a MeterProvider that exports them (see cmd/idem-server's /metrics).
func ExampleServer() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	create := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux := http.NewServeMux()
	mux.Handle("POST /payments", server.Middleware(memstore.New(),
		idemotel.Server(idemotel.WithMeterProvider(mp), idemotel.WithStoreName("memory")))(create))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 { // a request and its retry
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":10}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "idem.server.requests" {
			continue
		}
		for _, outcome := range []string{"executed", "replayed"} {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := p.Attributes.Value("idem.outcome"); v.AsString() == outcome {
					route, _ := p.Attributes.Value("http.route")
					fmt.Printf("%s %s: %d\n", route.AsString(), outcome, p.Value)
				}
			}
		}
	}
	// Output:
	// /payments executed: 1
	// /payments replayed: 1
}

// The client's attempts and retries, read here from an in-memory reader.
func ExampleNewClient() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	failures := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	c := idemotel.NewClient(idemotel.WithMeterProvider(mp))
	client := &http.Client{Transport: idem.NewTransport(c.Transport(srv.Client().Transport), c.Option(),
		idem.WithBackoff(time.Millisecond, time.Millisecond))}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":10}`))
	req.Header.Set("Idempotency-Key", "order-42")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch m.Name {
		case "idem.client.retries":
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				reason, _ := p.Attributes.Value("idem.retry.reason")
				fmt.Printf("retries (%s): %d\n", reason.AsString(), p.Value)
			}
		case "idem.client.attempts":
			for _, p := range m.Data.(metricdata.Histogram[int64]).DataPoints {
				fmt.Printf("operations: %d, attempts: %d\n", p.Count, p.Sum)
			}
		}
	}
	// Unordered output:
	// operations: 1, attempts: 2
	// retries (status): 1
}
