package ginidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/ginidem"
	"github.com/idemkit/idem/server/memstore"
)

func ExampleMiddleware() {
	charges := 0
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/payments", ginidem.Middleware(memstore.New()), func(c *gin.Context) {
		charges++ // the charge at the payment provider
		ginidem.DeclareEffect(c)
		c.JSON(http.StatusCreated, gin.H{"id": fmt.Sprintf("pay_%d", charges)})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1000}`))
		req.Header.Set(server.HeaderKey, "order-42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get(server.HeaderReplayed) == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"id":"pay_1"} replayed: false
	// 201 {"id":"pay_1"} replayed: true
	// charges: 1
}
