package check_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/cmd/idem-check/check"
	"github.com/idemkit/idem/server/idemtest"
)

// Checking idem's own demo server, in-process: the rows that need no extra
// setting pass, the others say what they need.
func ExampleRun() {
	srv := idemtest.NewServer()
	defer srv.Close()

	rep, err := check.Run(context.Background(), check.Config{
		URL:    srv.URL + "/payments",
		Body:   []byte(`{"customer":"cus_1","amount":100,"currency":"EUR"}`),
		Header: http.Header{"Authorization": {"Bearer alice"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"missing-key", "replay-body", "mismatch", "invalid-key-two-lines", "scope"} {
		row := rep.Row(id)
		fmt.Println(row.Verdict, row.ID)
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// PASS missing-key
	// PASS replay-body
	// PASS mismatch
	// PASS invalid-key-two-lines
	// SKIP scope
	// failed: false
}
