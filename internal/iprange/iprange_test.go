package iprange

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, first, last, text string }{
		{"127.0.1.1-127.0.1.254", "127.0.1.1", "127.0.1.254", "127.0.1.1-127.0.1.254"},
		{" 10.0.0.9 - 10.0.0.9 ", "10.0.0.9", "10.0.0.9", "10.0.0.9-10.0.0.9"},
		{"127.0.2.7/24", "127.0.2.0", "127.0.2.255", "127.0.2.0/24"},
		{"fd00::/126", "fd00::", "fd00::3", "fd00::/126"},
		{"", "", "", ""},
		{"10.0.0.9-10.0.0.1", "", "", ""},
		{"10.0.0.1-fd00::1", "", "", ""},
		{"10.0.0.1-x", "", "", ""},
		{"127.0.2.0/33", "", "", ""},
	} {
		r, err := Parse(tc.in)
		if tc.first == "" {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", tc.in, r)
			}
			continue
		}
		if err != nil || r.First.String() != tc.first || r.Last.String() != tc.last || r.String() != tc.text {
			t.Errorf("Parse(%q) = %s..%s %q, %v; want %s..%s %q", tc.in, r.First, r.Last, r, err, tc.first, tc.last, tc.text)
		}
	}
}
