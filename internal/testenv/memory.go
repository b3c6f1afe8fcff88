package testenv

import (
	"bytes"
	"runtime"
)

// GoroutinesBlockedIn counts this process's goroutines blocked on the network ("IO
// wait") with fn, such as "inbound.ReadBody(", on their stacks.
func GoroutinesBlockedIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte(fn)) {
			count++
		}
	}
	return count
}

// HeapInUse returns the bytes of heap in use after a collection.
func HeapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// MiB converts bytes to MiB.
func MiB(b uint64) float64 { return float64(b) / (1 << 20) }
