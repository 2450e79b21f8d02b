package storetest

import (
	"encoding/json"
	"net/http"

	"github.com/idemkit/idem/server"
)

// problemEffect is the problem type of the suite handler's own 503 (its
// business write was refused), which a scenario tells from the middleware's.
const problemEffect = server.ProblemBase + "storetest-effect-failed"

// opRequest is the body the suite's handler takes: the operation whose
// effect it records, and an amount that makes bodies differ. Other fields are
// ignored.
type opRequest struct {
	Op     string `json:"op"`
	Amount int64  `json:"amount"`
}

// opResponse is the body of the handler's 201: a fresh id per execution, so
// that two executions never answer the same bytes.
type opResponse struct {
	ID     string `json:"id"`
	Op     string `json:"op"`
	Amount int64  `json:"amount"`
}

// hooks are called around the business write; a scenario sets them to hold,
// fail or crash a request there.
type hooks struct {
	beforeWrite func(r *http.Request) error
	afterWrite  func(r *http.Request)
	// failAfterWrite, when it reports true, makes the handler answer its
	// own 500 after the business write.
	failAfterWrite func(r *http.Request) bool
}

// effectHandler is the suite's protected handler: it decodes an opRequest
// (400 when it cannot), calls beforeWrite (503, no write, when it fails),
// records one effect of the operation, calls afterWrite, answers 500 when
// failAfterWrite says so, and else answers 201 with a Location and an
// opResponse.
func effectHandler(fx Effects, h func() hooks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in opRequest
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Op == "" {
			http.Error(w, "want a JSON object with an op", http.StatusBadRequest)
			return
		}
		if f := h().beforeWrite; f != nil {
			if err := f(r); err != nil {
				writeEffectFailed(w)
				return
			}
		}
		if err := fx.Insert(r.Context(), in.Op); err != nil {
			writeEffectFailed(w)
			return
		}
		if f := h().afterWrite; f != nil {
			f(r)
		}
		if f := h().failAfterWrite; f != nil && f(r) {
			http.Error(w, "the step after the effect failed", http.StatusInternalServerError)
			return
		}
		out := opResponse{ID: "op_" + randomHex(8), Op: in.Op, Amount: in.Amount}
		body, _ := json.Marshal(out) // always marshals
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/ops/"+out.ID)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(append(body, '\n'))
	})
}

func writeEffectFailed(w http.ResponseWriter) {
	body, _ := json.Marshal(server.Problem{Type: problemEffect, Title: "Effect not recorded",
		Status: http.StatusServiceUnavailable})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}
