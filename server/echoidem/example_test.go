package echoidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/echoidem"
	"github.com/idemkit/idem/server/memstore"
)

func ExampleMiddleware() {
	charges, down := 0, true
	e := echo.New()
	e.POST("/payments", func(c echo.Context) error {
		if down { // the provider fails once: a failure, released
			down = false
			return echo.NewHTTPError(http.StatusServiceUnavailable, "provider down")
		}
		charges++
		echoidem.DeclareEffect(c)
		return c.JSON(http.StatusCreated, map[string]string{"id": fmt.Sprintf("pay_%d", charges)})
	}, echoidem.Middleware(memstore.New()))
	srv := httptest.NewServer(e)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1000}`))
		req.Header.Set(server.HeaderKey, "order-42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)), "replayed:", resp.Header.Get(server.HeaderReplayed) == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 503 {"message":"provider down"} replayed: false
	// 201 {"id":"pay_1"} replayed: false
	// 201 {"id":"pay_1"} replayed: true
	// charges: 1
}
