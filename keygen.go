package idem

import (
	"crypto/rand"
	"sync"
)

// randBlock is how many random bytes a keySource reads from crypto/rand at a
// time: 32 keys' worth. Reading in blocks saves a system call and an
// allocation per key; a small block keeps the occasional refill short.
const randBlock = 32 * 16

// keySource is a block of random bytes from crypto/rand, used up 16 bytes per
// key. Sources are pooled: a source belongs to one goroutine between Get and
// Put, so no byte is ever used twice, and the pool keeps one per P.
type keySource struct {
	buf [randBlock]byte
	off int // bytes of buf used
}

var keySources = sync.Pool{New: func() any { return &keySource{off: randBlock} }}

// newKeyV4 returns a new random UUID version 4 (RFC 9562 §5.4, formerly RFC
// 4122) in its canonical 36-character form: the default key generator. Its
// 122 random bits come from crypto/rand, like uuid.NewString's, but are read in
// blocks, without touching the uuid package's global settings (unlike
// uuid.EnableRandPool).
func newKeyV4() string {
	s := keySources.Get().(*keySource)
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
	keySources.Put(s)
	return formatUUIDv4(&u)
}

// formatUUIDv4 sets the version (4) and variant (10) bits of u and returns
// it in the canonical lower-case form xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx.
func formatUUIDv4(u *[16]byte) string {
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
