package server

import (
	"context"
	"net/http"
	"slices"
	"sync"
)

// fakeStore is a minimal correct Store for the middleware's tests that
// counts what it is asked. do, when set, replaces its behaviour.
type fakeStore struct {
	mu      sync.Mutex
	calls   int
	reqs    []Request
	keeps   []bool // what run said, per run
	records map[[2]string]*fakeRecord
	do      func(ctx context.Context, req Request, run RunFunc) (Result, error)
	// mark, when set, is the durable effect mark the store passes run
	// (ContextWithEffectMark).
	mark func(ctx context.Context) error
}

type fakeRecord struct {
	fingerprint string
	running     bool
	resp        *Response
}

func (s *fakeStore) Do(ctx context.Context, req Request, run RunFunc) (Result, error) {
	s.mu.Lock()
	s.calls++
	s.reqs = append(s.reqs, req)
	do := s.do
	s.mu.Unlock()
	if do != nil {
		return do(ctx, req, s.counted(run))
	}
	k := [2]string{req.Scope, req.Key}
	s.mu.Lock()
	if s.records == nil {
		s.records = map[[2]string]*fakeRecord{}
	}
	if rec := s.records[k]; rec != nil {
		s.mu.Unlock()
		switch {
		case rec.fingerprint != req.Fingerprint:
			return Result{Outcome: OutcomeMismatch}, nil
		case rec.running:
			return Result{Outcome: OutcomeInProgress}, nil
		}
		return Result{Outcome: OutcomeReplayed, Response: cloneResponse(rec.resp)}, nil
	}
	rec := &fakeRecord{fingerprint: req.Fingerprint, running: true}
	s.records[k] = rec
	s.mu.Unlock()
	released := false
	defer func() {
		if !released {
			s.mu.Lock()
			delete(s.records, k)
			s.mu.Unlock()
		}
	}()
	if s.mark != nil {
		ctx = ContextWithEffectMark(ctx, s.mark)
	}
	resp, keep := s.counted(run)(ctx)
	released = true
	s.mu.Lock()
	if keep {
		rec.running, rec.resp = false, cloneResponse(resp)
	} else {
		delete(s.records, k)
	}
	s.mu.Unlock()
	return Result{Outcome: OutcomeExecuted, Response: resp}, nil
}

// counted wraps run to remember keep.
func (s *fakeStore) counted(run RunFunc) RunFunc {
	return func(ctx context.Context) (*Response, bool) {
		resp, keep := run(ctx)
		s.mu.Lock()
		s.keeps = append(s.keeps, keep)
		s.mu.Unlock()
		return resp, keep
	}
}

func (s *fakeStore) stats() (calls int, keeps []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, slices.Clone(s.keeps)
}

func (s *fakeStore) lastRequest() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[len(s.reqs)-1]
}

func cloneResponse(r *Response) *Response {
	h := make(http.Header, len(r.Header))
	for k, v := range r.Header {
		h[k] = slices.Clone(v)
	}
	return &Response{Status: r.Status, Header: h, Body: slices.Clone(r.Body)}
}
