package egress

import (
	"net"
	"net/netip"
	"strings"
)

// addrClass is why an address is refused: reason is the metric label and
// log field, what completes "X resolves to A, ..." for the agent.
type addrClass struct {
	reason string
	what   string
}

var (
	classLoopback     = addrClass{"loopback", "a loopback address"}
	classPrivate      = addrClass{"private", "a private address"}
	classLinkLocal    = addrClass{"link_local", "a link-local address"}
	classMulticast    = addrClass{"multicast", "a multicast address"}
	classUnspecified  = addrClass{"unspecified", "the unspecified address"}
	classThisNetwork  = addrClass{"this_network", "a \"this network\" (0.0.0.0/8) address"}
	classCGNAT        = addrClass{"cgnat", "a carrier-grade NAT (100.64.0.0/10) address"}
	classBenchmarking = addrClass{"benchmarking", "a benchmarking (198.18.0.0/15) address"}
	classBroadcast    = addrClass{"broadcast", "the broadcast address"}
	classReserved     = addrClass{"reserved", "a reserved address"}
	classMetadata     = addrClass{"metadata", "a cloud metadata address"}
	// classHost is a public address of the proxy's own machine, where the
	// host's services (its NATS, its API) may listen beyond loopback.
	classHost = addrClass{"host_address", "an address of the host itself"}
)

// metadataAddrs are the instance-metadata services of the big clouds (AWS,
// GCP and Azure on 169.254.169.254, AWS over IPv6, Alibaba, Oracle): they
// hand out credentials to whoever asks from the machine.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true,
	netip.MustParseAddr("fd00:ec2::254"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
	netip.MustParseAddr("192.0.0.192"):     true,
}

// metadataNames are refused by name before any lookup: inside a cloud they
// resolve (through the cloud's own DNS) to the metadata service, and some
// clouds may answer from an address not listed above.
var metadataNames = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

type rangeRule struct {
	prefix netip.Prefix
	class  addrClass
}

func rules(class addrClass, prefixes ...string) []rangeRule {
	r := make([]rangeRule, len(prefixes))
	for i, p := range prefixes {
		r[i] = rangeRule{netip.MustParsePrefix(p), class}
	}
	return r
}

func concat(parts ...[]rangeRule) []rangeRule {
	var out []rangeRule
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Rules are tried in order, so narrower ranges come before wider ones that
// contain them. Documentation ranges (192.0.2.0/24, 2001:db8::/32 ...) are
// not listed: nothing routes them, so refusing them protects nothing.
var (
	v4Rules = concat(
		rules(classUnspecified, "0.0.0.0/32"),
		rules(classThisNetwork, "0.0.0.0/8"),
		rules(classLoopback, "127.0.0.0/8"),
		rules(classPrivate, "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
		rules(classCGNAT, "100.64.0.0/10"),
		rules(classLinkLocal, "169.254.0.0/16"),
		// IETF protocol assignments: not globally reachable (RFC 6890).
		rules(classReserved, "192.0.0.0/24"),
		rules(classBenchmarking, "198.18.0.0/15"),
		rules(classMulticast, "224.0.0.0/4"),
		rules(classBroadcast, "255.255.255.255/32"),
		rules(classReserved, "240.0.0.0/4"),
	)
	v6Rules = concat(
		rules(classUnspecified, "::/128"),
		rules(classLoopback, "::1/128"),
		// IPv4-compatible addresses are deprecated; nothing public uses them.
		rules(classReserved, "::/96", "100::/64"),
		// Local-use NAT64 reaches whatever the operator's translator reaches.
		rules(classPrivate, "64:ff9b:1::/48", "fc00::/7", "fec0::/10"),
		rules(classLinkLocal, "fe80::/10"),
		rules(classMulticast, "ff00::/8"),
	)
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// classify returns why a must be refused, or ok == false when a is an
// ordinary public address. IPv4 addresses carried inside IPv6 (mapped,
// NAT64, 6to4) are judged by the IPv4 address they lead to.
func classify(a netip.Addr) (c addrClass, refused bool) {
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if metadataAddrs[a] {
		return classMetadata, true
	}
	if a.Is4() {
		return match(v4Rules, a)
	}
	if !a.Is6() {
		return classReserved, true // the zero Addr: nothing to dial
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return classify(netip.AddrFrom4([4]byte(b[12:16])))
	case sixTo4.Contains(a):
		return classify(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return match(v6Rules, a)
}

func match(rs []rangeRule, a netip.Addr) (addrClass, bool) {
	for _, r := range rs {
		if r.prefix.Contains(a) {
			return r.class, true
		}
	}
	return addrClass{}, false
}

// permitted reports whether an operator prefix covers a, in either its
// IPv6-mapped or its plain IPv4 form.
func permitted(permit []netip.Prefix, a netip.Addr) bool {
	a = a.WithZone("")
	for _, p := range permit {
		if p.Contains(a) || p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// addrVerdict is the outcome of checking every address of a host.
type addrVerdict struct {
	refused   bool
	addr      netip.Addr // the first refused address
	class     addrClass
	permitted bool // some address needed a Permit prefix to pass
}

// checkAddrs refuses the whole set if any address is refused: a client may
// connect to any address of a name, and so may the proxy on a retry. own
// are the machine's own addresses, refused like the ranges above.
func checkAddrs(permit []netip.Prefix, own map[netip.Addr]bool, addrs []netip.Addr) addrVerdict {
	var v addrVerdict
	for _, a := range addrs {
		c, bad := classify(a)
		if !bad && own[a.WithZone("").Unmap()] {
			c, bad = classHost, true
		}
		if !bad {
			continue
		}
		if permitted(permit, a) {
			v.permitted = true
			continue
		}
		return addrVerdict{refused: true, addr: a, class: c}
	}
	return v
}

func isMetadataName(host string) bool {
	return metadataNames[strings.TrimSuffix(host, ".")]
}

// ownAddrs returns the addresses of this machine's interfaces, unmapped.
// They are read per decision: interfaces come and go (DHCP, VPNs), and a
// decision already costs a DNS lookup.
func ownAddrs() map[netip.Addr]bool {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	own := make(map[netip.Addr]bool, len(ifaddrs))
	for _, ia := range ifaddrs {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			own[pfx.Addr().WithZone("").Unmap()] = true
		}
	}
	return own
}
