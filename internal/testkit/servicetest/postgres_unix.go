//go:build unix

package servicetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// PostgresCluster is a PostgreSQL cluster of a test's own, made by
// InitPostgres: a data directory initialised in a temporary directory, which
// Command serves. The tests that stop, freeze or kill a PostgreSQL use one,
// never the shared server.
type PostgresCluster struct {
	BinDir string // the server binaries: initdb, postgres
	Data   string // the data directory
	// cred is the postgres user's when the test runs as root (initdb and
	// postgres refuse to run as root), nil otherwise.
	cred *syscall.Credential
}

// InitPostgres runs initdb (user postgres, trust authentication, UTF8, no
// sync) in a new temporary directory whose name starts with prefix, as the
// postgres user when the test runs as root, and removes the directory when
// the test ends. Missing server binaries, or no postgres user to run them as
// under root, end the test through Unreachable.
func InitPostgres(t testing.TB, prefix string) *PostgresCluster {
	t.Helper()
	binDir, err := postgresBinDir()
	if err != nil {
		Unreachable(t, "PostgreSQL server binaries not found (%v): install postgresql", err)
	}
	cred, err := postgresCredential()
	if err != nil {
		Unreachable(t, "cannot run initdb: %v", err)
	}
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	c := &PostgresCluster{BinDir: binDir, Data: filepath.Join(base, "data"), cred: cred}
	if err := os.Mkdir(c.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(c.Data, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	initdb := c.asPostgres(exec.Command(filepath.Join(binDir, "initdb"), "-D", c.Data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"))
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	return c
}

// Command returns the command that serves the cluster on 127.0.0.1:port with
// no Unix socket and fsync off (a killed or frozen process loses nothing the
// kernel already has), then settings (more "-c", "name=value" pairs), as the
// postgres user when the test runs as root. Its SysProcAttr is set, for the
// caller to add to.
func (c *PostgresCluster) Command(port string, settings ...string) *exec.Cmd {
	args := append([]string{"-D", c.Data, "-p", port, "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "fsync=off"}, settings...)
	return c.asPostgres(exec.Command(filepath.Join(c.BinDir, "postgres"), args...))
}

// URL is the URL of the cluster's postgres database served on port (user
// postgres, trust).
func (c *PostgresCluster) URL(port string) string {
	return "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"
}

// asPostgres makes cmd run as the postgres user when the test runs as root,
// in the C locale.
func (c *PostgresCluster) asPostgres(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// postgresBinDir returns the newest /usr/lib/postgresql/*/bin holding
// initdb, or the directory of initdb in PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("no /usr/lib/postgresql/*/bin/initdb and no initdb in PATH")
	}
	return filepath.Dir(p), nil
}

// postgresCredential returns nil when the test does not run as root, and the
// postgres user's otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
