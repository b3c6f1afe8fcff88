package gatewaystatus

import (
	"maps"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestParseAddressPool(t *testing.T) {
	for _, tc := range []struct {
		in          string
		first, last string // empty: the pool is rejected
		text        string
	}{
		{in: DefaultAddressPool, first: "127.0.1.1", last: "127.0.1.254", text: "127.0.1.1-127.0.1.254"},
		{in: "127.0.1.0/24", first: "127.0.1.0", last: "127.0.1.255", text: "127.0.1.0/24"},
		{in: "10.1.2.3/30", first: "10.1.2.0", last: "10.1.2.3", text: "10.1.2.0/30"},
		{in: "192.0.2.7/32", first: "192.0.2.7", last: "192.0.2.7", text: "192.0.2.7/32"},
		{in: " 10.0.0.9 - 10.0.0.9 ", first: "10.0.0.9", last: "10.0.0.9", text: "10.0.0.9-10.0.0.9"},
		{in: "fd00::/126", first: "fd00::", last: "fd00::3", text: "fd00::/126"},
		{in: "fd00::1-fd00::ff", first: "fd00::1", last: "fd00::ff", text: "fd00::1-fd00::ff"},
		{in: ""},
		{in: "127.0.1.1"},
		{in: "127.0.1.0/33"},
		{in: "127.0.1.9-127.0.1.1"},
		{in: "127.0.1.1-fd00::1"},
		{in: "127.0.1.1-nope"},
		{in: "fe80::1%eth0-fe80::9%eth0"},
	} {
		p, err := ParseAddressPool(tc.in)
		if tc.first == "" {
			if err == nil {
				t.Errorf("ParseAddressPool(%q) = %s, want an error", tc.in, p)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseAddressPool(%q): %v", tc.in, err)
			continue
		}
		if p.first.String() != tc.first || p.last.String() != tc.last || p.String() != tc.text {
			t.Errorf("ParseAddressPool(%q) = %s..%s %q, want %s..%s %q", tc.in, p.first, p.last, p, tc.first, tc.last, tc.text)
		}
	}
}

// gateway is a Gateway created at minute created, with a spec address and a status
// address when they are not empty.
func gateway(name string, created int, spec, status string) *gatewayv1.Gateway {
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(0, 0).Add(time.Duration(created) * time.Minute)),
	}}
	if spec != "" {
		gw.Spec.Addresses = []gatewayv1.GatewaySpecAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: spec}}
	}
	if status != "" {
		gw.Status.Addresses = []gatewayv1.GatewayStatusAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: status}}
	}
	return gw
}

func TestAllocate(t *testing.T) {
	pool, err := ParseAddressPool("10.0.0.1-10.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		gateways  []*gatewayv1.Gateway
		want      map[string]string // Gateway name -> address
		exhausted []string
	}{{
		name:     "lowest free address, oldest first",
		gateways: []*gatewayv1.Gateway{gateway("b", 2, "", ""), gateway("a", 1, "", "")},
		want:     map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"},
	}, {
		name:     "same creation time: by name",
		gateways: []*gatewayv1.Gateway{gateway("b", 1, "", ""), gateway("a", 1, "", "")},
		want:     map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"},
	}, {
		name:     "status addresses are kept",
		gateways: []*gatewayv1.Gateway{gateway("a", 1, "", "10.0.0.3"), gateway("b", 2, "", "10.0.0.1"), gateway("c", 3, "", "")},
		want:     map[string]string{"a": "10.0.0.3", "b": "10.0.0.1", "c": "10.0.0.2"},
	}, {
		name: "a newer Gateway keeps its address while an older one needs a fresh one",
		gateways: []*gatewayv1.Gateway{
			gateway("old", 1, "", ""), gateway("new", 2, "", "10.0.0.1"),
		},
		want: map[string]string{"old": "10.0.0.2", "new": "10.0.0.1"},
	}, {
		name:     "an address two Gateways show goes to the older one",
		gateways: []*gatewayv1.Gateway{gateway("b", 2, "", "10.0.0.2"), gateway("a", 1, "", "10.0.0.2")},
		want:     map[string]string{"a": "10.0.0.2", "b": "10.0.0.1"},
	}, {
		name:     "an address outside the pool is replaced",
		gateways: []*gatewayv1.Gateway{gateway("a", 1, "", "10.9.9.9")},
		want:     map[string]string{"a": "10.0.0.1"},
	}, {
		name:     "spec addresses are never allocated and win over status addresses",
		gateways: []*gatewayv1.Gateway{gateway("a", 1, "", "10.0.0.1"), gateway("pinned", 2, "10.0.0.1", ""), gateway("b", 3, "", "")},
		want:     map[string]string{"a": "10.0.0.2", "b": "10.0.0.3"},
	}, {
		name: "exhausted",
		gateways: []*gatewayv1.Gateway{
			gateway("a", 1, "", ""), gateway("b", 2, "", ""), gateway("c", 3, "", ""), gateway("d", 4, "", ""), gateway("e", 5, "", "10.0.0.2"),
		},
		want:      map[string]string{"a": "10.0.0.1", "b": "10.0.0.3", "e": "10.0.0.2"},
		exhausted: []string{"c", "d"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := allocate(pool, tc.gateways)
			want := map[types.NamespacedName]netip.Addr{}
			for name, ip := range tc.want {
				want[types.NamespacedName{Namespace: "ns", Name: name}] = netip.MustParseAddr(ip)
			}
			if !maps.Equal(got.addresses, want) {
				t.Errorf("addresses %v, want %v", got.addresses, want)
			}
			exhausted := map[types.NamespacedName]bool{}
			for _, name := range tc.exhausted {
				exhausted[types.NamespacedName{Namespace: "ns", Name: name}] = true
			}
			if !maps.Equal(got.exhausted, exhausted) {
				t.Errorf("exhausted %v, want %v", got.exhausted, exhausted)
			}
		})
	}

	if got := allocate(nil, []*gatewayv1.Gateway{gateway("a", 1, "", "10.0.0.1")}); len(got.addresses)+len(got.exhausted) != 0 {
		t.Errorf("a nil pool allocated %+v", got)
	}
}
