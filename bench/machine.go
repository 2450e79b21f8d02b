package bench

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	OS, Arch   string
	CPU        string // the model name, where the OS tells it
	Cores      int    // runtime.NumCPU
	GOMAXPROCS int
	GoVersion  string
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute load averages when the run
	// started ("unknown" elsewhere): other work on the machine skews timings.
	LoadAvg string
}

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	return Machine{
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		LoadAvg:    loadAvg(),
	}
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}

// loadAvg returns the first three fields of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// peers are the modules the bench measures idem against, and what of each.
var peers = []struct{ path, what string }{
	{"github.com/hashicorp/go-retryablehttp", ""},
	{"github.com/failsafe-go/failsafe-go", "failsafehttp"},
	{"github.com/cenkalti/backoff/v4", ""},
	{"github.com/grpc-ecosystem/go-grpc-middleware/v2", "interceptors/retry"},
	{"google.golang.org/grpc", "the gRPC transport of section 9"},
}

// peerVersions names each peer with the version this binary was built with
// (from its build information; "version unknown" without it).
func peerVersions() string {
	versions := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			versions[d.Path] = d.Version
		}
	}
	var parts []string
	for _, p := range peers {
		v := versions[p.path]
		if v == "" {
			v = "version unknown"
		}
		s := p.path + " " + v
		if p.what != "" {
			s += " (" + p.what + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
