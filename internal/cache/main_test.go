package cache

import (
	"testing"

	"go.uber.org/goleak"
)

// metadataWatchLeak ignores the goroutine a metadata-only informer (the gateway's Secret
// watch) can leave behind when its manager stops: controller-runtime wraps such watches
// in a watch.Filter, which stays blocked sending the watch's last event once the
// reflector no longer reads (kubernetes/kubernetes#113254).
var metadataWatchLeak = goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, metadataWatchLeak)
}
