package testenv

import "testing"

// TestFreeAddrNeverRepeatsAPort asks for many addresses, closing each port before the
// next call as FreeAddr's callers leave them until they bind: the kernel hands some
// ports out again (four times in 200 calls on the machine this was written on), and
// FreeAddr must not, nor give out a port that Listen listens on.
func TestFreeAddrNeverRepeatsAPort(t *testing.T) {
	seen := map[string]int{}
	for i := range 500 {
		var addr string
		if i%10 == 0 {
			addr = Listen(t, "127.0.0.1").Addr().String()
		} else {
			addr = FreeAddr(t, "127.0.0.1")
		}
		if first, ok := seen[addr]; ok {
			t.Fatalf("call %d returned %s, as call %d did", i, addr, first)
		}
		seen[addr] = i
	}
}
