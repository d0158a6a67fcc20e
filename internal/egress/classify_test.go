package egress

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		addr   string
		reason string // "" = public, allowed
	}{
		// Public.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"2001:4860:4860::8888", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8

		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "this_network"},
		{"0.255.255.255", "this_network"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"10.0.0.0", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.0.1", "private"},
		{"192.168.255.255", "private"},
		{"fc00::1", "private"},
		{"fd12:3456:789a::1", "private"},
		{"fec0::1", "private"},          // deprecated site-local
		{"64:ff9b:1::a00:1", "private"}, // local-use NAT64
		{"100.64.0.0", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"169.254.0.1", "link_local"},
		{"169.254.255.255", "link_local"},
		{"fe80::1", "link_local"},
		{"fe80::1%eth0", "link_local"},
		{"febf::1", "link_local"},
		{"198.18.0.0", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.0.8", "reserved"},
		{"::a00:1", "reserved"}, // IPv4-compatible
		{"100::1", "reserved"},  // discard-only

		// Metadata services, checked before the ranges that hold them.
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"100.100.100.200", "metadata"},
		{"192.0.0.192", "metadata"},
		{"::ffff:169.254.169.254", "metadata"},

		// IPv4 inside IPv6 is judged as the IPv4 address it leads to.
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.1.2.3", "private"},
		{"::ffff:100.64.1.1", "cgnat"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"::ffff:255.255.255.255", "broadcast"},
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::a9fe:a9fe", "metadata"},
		{"2002:c0a8:101::1", "private"}, // 6to4 of 192.168.1.1
		{"2002:7f00:1::", "loopback"},
	}
	for _, tc := range cases {
		c, refused := classify(netip.MustParseAddr(tc.addr))
		switch {
		case tc.reason == "" && refused:
			t.Errorf("%s refused as %s; it is public", tc.addr, c.reason)
		case tc.reason != "" && !refused:
			t.Errorf("%s allowed; want refused as %s", tc.addr, tc.reason)
		case refused && c.reason != tc.reason:
			t.Errorf("%s refused as %s, want %s", tc.addr, c.reason, tc.reason)
		}
	}
	if _, refused := classify(netip.Addr{}); !refused {
		t.Error("the zero Addr is allowed")
	}
}

func TestCheckAddrsPermit(t *testing.T) {
	permit := []netip.Prefix{
		netip.MustParsePrefix("10.20.0.0/16"),
		netip.MustParsePrefix("fd00:1::/64"),
		netip.MustParsePrefix("169.254.169.254/32"), // an operator may open even this
	}
	cases := []struct {
		addrs     []string
		refused   string // the first refused address, "" when all pass
		permitted bool
	}{
		{[]string{"8.8.8.8"}, "", false},
		{[]string{"10.20.1.1"}, "", true},
		{[]string{"::ffff:10.20.1.1"}, "", true}, // mapped form of a permitted address
		{[]string{"fd00:1::5"}, "", true},
		{[]string{"169.254.169.254"}, "", true},
		{[]string{"10.21.0.1"}, "10.21.0.1", false},
		{[]string{"fd00:2::5"}, "fd00:2::5", false},
		{[]string{"8.8.8.8", "10.20.1.1"}, "", true},
		// One bad address refuses the whole name.
		{[]string{"10.20.1.1", "8.8.8.8", "192.168.1.1"}, "192.168.1.1", false},
		{[]string{"8.8.8.8", "::1"}, "::1", false},
		{[]string{"169.254.1.1"}, "169.254.1.1", false},
		// The machine's own public address is refused like a private one.
		{[]string{"8.8.8.8", "203.0.113.9"}, "203.0.113.9", false},
		{[]string{"::ffff:203.0.113.9"}, "::ffff:203.0.113.9", false},
	}
	own := map[netip.Addr]bool{netip.MustParseAddr("203.0.113.9"): true}
	for _, tc := range cases {
		var addrs []netip.Addr
		for _, a := range tc.addrs {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		v := checkAddrs(permit, own, addrs)
		got := ""
		if v.refused {
			got = v.addr.String()
		}
		if got != tc.refused || !v.refused && v.permitted != tc.permitted {
			t.Errorf("checkAddrs(%v) = refused %q permitted %v; want %q %v", tc.addrs, got, v.permitted, tc.refused, tc.permitted)
		}
	}
	if v := checkAddrs(nil, nil, []netip.Addr{netip.MustParseAddr("10.20.1.1")}); !v.refused {
		t.Error("a private address passed without a Permit")
	}
	if v := checkAddrs([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, own, []netip.Addr{netip.MustParseAddr("203.0.113.9")}); v.refused {
		t.Error("a Permit prefix does not cover the host's own address")
	}
}

func TestMetadataNames(t *testing.T) {
	for _, n := range []string{"metadata.google.internal", "metadata.google.internal.", "metadata", "metadata.goog", "instance-data.ec2.internal"} {
		if !isMetadataName(n) {
			t.Errorf("%s is not refused by name", n)
		}
	}
	for _, n := range []string{"api.anthropic.com", "metadata.example.com", "google.internal"} {
		if isMetadataName(n) {
			t.Errorf("%s is refused by name", n)
		}
	}
}
