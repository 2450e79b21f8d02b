package bench

import (
	"bufio"
	"os"
	"runtime"
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
