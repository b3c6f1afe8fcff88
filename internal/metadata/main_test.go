package metadata_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: servers, managers
// and HTTP clients must all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
