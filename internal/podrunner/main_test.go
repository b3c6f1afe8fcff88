package podrunner

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, removes the programs they built, and fails the package if
// any test left a goroutine behind: runners, forwarders, probes and informers must all
// stop.
func TestMain(m *testing.M) {
	code := m.Run()
	if programs.dir != "" {
		_ = os.RemoveAll(programs.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
