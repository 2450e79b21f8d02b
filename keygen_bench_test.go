package idem

// The key generator idem had before it used uuid.NewString: crypto/rand read
// in pooled blocks. Kept here only to measure, in the same run, what the plain
// version costs (BenchmarkKeyGenLoopbackPaired).

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// pooledRandBlock is how many random bytes a pooledKeySource reads from crypto/rand at a
// time: 32 keys' worth. Reading in blocks saves a system call and an
// allocation per key; a small block keeps the occasional refill short.
const pooledRandBlock = 32 * 16

// pooledKeySource is a block of random bytes from crypto/rand, used up 16 bytes per
// key. Sources are pooled: a source belongs to one goroutine between Get and
// Put, so no byte is ever used twice, and the pool keeps one per P.
type pooledKeySource struct {
	buf [pooledRandBlock]byte
	off int // bytes of buf used
}

var pooledKeySources = sync.Pool{New: func() any { return &pooledKeySource{off: pooledRandBlock} }}

// pooledKeyV4 returns a new random UUID version 4 (RFC 9562 §5.4, formerly RFC
// 4122) in its canonical 36-character form: the default key generator. Its
// 122 random bits come from crypto/rand, like uuid.NewString's, but are read in
// blocks, without touching the uuid package's global settings (unlike
// uuid.EnableRandPool).
func pooledKeyV4() string {
	s := pooledKeySources.Get().(*pooledKeySource)
	if s.off+16 > len(s.buf) {
		// crypto/rand.Read does not fail (it crashes the program if the
		// system's source is broken).
		_, _ = rand.Read(s.buf[:])
		s.off = 0
	}
	var u [16]byte
	copy(u[:], s.buf[s.off:s.off+16])
	clear(s.buf[s.off : s.off+16]) // used bytes are not kept
	s.off += 16
	pooledKeySources.Put(s)
	return pooledFormatUUIDv4(&u)
}

// pooledFormatUUIDv4 sets the version (4) and variant (10) bits of u and returns
// it in the canonical lower-case form xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx.
func pooledFormatUUIDv4(u *[16]byte) string {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j] = hex[c>>4]
		b[j+1] = hex[c&0x0f]
		j += 2
	}
	return string(b[:])
}

// BenchmarkKeyGenLoopbackPaired alternates a POST keyed by uuid.NewString
// (idem's default) and one keyed by the former pooled generator, over
// loopback, and reports the ratio of their times: the pooled blocks are kept
// only if they buy 2% or more.
//
//	go test -run '^$' -bench KeyGenLoopbackPaired -count 5
func BenchmarkKeyGenLoopbackPaired(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	payload := []byte(`{"customer":"cus_4242","amount":1999,"currency":"EUR"}`)
	base1, base2 := &http.Transport{MaxIdleConnsPerHost: 4}, &http.Transport{MaxIdleConnsPerHost: 4}
	defer base1.CloseIdleConnections()
	defer base2.CloseIdleConnections()
	plain, pooled := NewTransport(base1), NewTransport(base2, WithKeyGenerator(pooledKeyV4))
	post := func(rt http.RoundTripper) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(payload))
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	var tPlain, tPooled time.Duration
	for b.Loop() {
		t0 := time.Now()
		post(plain)
		t1 := time.Now()
		post(pooled)
		tPlain += t1.Sub(t0)
		tPooled += time.Since(t1)
	}
	b.ReportMetric(float64(tPlain)/float64(tPooled), "plain/pooled")
}
