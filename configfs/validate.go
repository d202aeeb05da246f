package configfs

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Limits taken from the kernel (include/linux/nvme.h, drivers/nvme/target).
const (
	// MaxNQNLen is the longest NQN a Linux host can use. The NVMe
	// specification allows 223 bytes (NVMF_NQN_SIZE), and nvmet keeps the
	// first 223 bytes of a longer directory name (kstrndup), but the Linux
	// initiator refuses an NQN of NVMF_NQN_SIZE bytes or more
	// (nvmf_parse_options: "needs to be < 223 bytes").
	MaxNQNLen = 222
	// DiscoveryNQN is the well-known discovery subsystem. nvmet refuses to
	// create it through configfs (EINVAL): it always exists implicitly.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

	maxSerialLen  = 20   // NVMET_SN_MAX_SIZE
	maxModelLen   = 40   // NVMET_MN_MAX_SIZE
	maxTrAddrLen  = 255  // NVMF_TRADDR_SIZE minus the NUL
	maxTrSvcIDLen = 31   // NVMF_TRSVCID_SIZE minus the NUL
	maxAttrLen    = 4095 // a configfs store sees at most SIMPLE_ATTR_SIZE-1 bytes
	maxANAGroupID = 128  // NVMET_MAX_ANAGRPS
	maxQID        = 128  // NVMET_NR_QUEUES
	// maxCntlID is NVME_CNTLID_MAX; 0xfff0-0xffff are reserved by the
	// NVMe base specification.
	maxCntlID = 0xffef
	// nsidAll (0xffffffff) is the broadcast NSID; nvmet refuses it and 0.
	nsidAll = 0xffffffff

	uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
)

// Transport types (addr_trtype) and address families (addr_adrfam) nvmet
// knows by name.
var (
	trTypes  = []string{"rdma", "fc", "tcp", "loop"}
	adrFams  = []string{"pcie", "ipv4", "ipv6", "ib", "fc", "loop"}
	ipTrType = []string{"tcp", "rdma"}
)

// ValidateNQN checks an NVMe Qualified Name (NVMe base specification,
// "NVMe Qualified Names") before it is used as a configfs directory name.
//
// Accepted: "nqn.yyyy-mm.<reverse domain>" optionally followed by ":" and a
// non-empty string, at most MaxNQNLen bytes, printable ASCII without spaces
// or "/". The UUID form "nqn.2014-08.org.nvmexpress:uuid:<uuid>" must carry a
// well-formed UUID. The discovery NQN is refused because nvmet refuses it.
// The specification allows UTF-8 in the user part; this package is stricter
// because the name becomes a path component and is typed by operators.
func ValidateNQN(nqn string) error {
	if err := checkNQN(nqn); err != nil {
		return invalidf(strconv.Quote(nqn), "%s", err)
	}
	return nil
}

func checkNQN(nqn string) error {
	switch {
	case nqn == "":
		return fmt.Errorf("NQN is empty")
	case len(nqn) > MaxNQNLen:
		return fmt.Errorf("NQN is %d bytes, more than %d", len(nqn), MaxNQNLen)
	case nqn == DiscoveryNQN:
		return fmt.Errorf("the discovery NQN cannot be configured")
	}
	for i := 0; i < len(nqn); i++ {
		if c := nqn[i]; c <= ' ' || c > '~' || c == '/' {
			return fmt.Errorf("byte %d (%q) is not printable ASCII other than space and '/'", i, c)
		}
	}
	rest, ok := strings.CutPrefix(nqn, "nqn.")
	if !ok {
		return fmt.Errorf(`NQN must start with "nqn."`)
	}
	// yyyy-mm.
	if len(rest) < 8 || !isDigits(rest[0:4]) || rest[4] != '-' || !isDigits(rest[5:7]) || rest[7] != '.' {
		return fmt.Errorf(`NQN must continue with a date "yyyy-mm." after "nqn."`)
	}
	if m, _ := strconv.Atoi(rest[5:7]); m < 1 || m > 12 {
		return fmt.Errorf("NQN date has month %s", rest[5:7])
	}
	domain, user, hasUser := strings.Cut(rest[8:], ":")
	if domain == "" {
		return fmt.Errorf("NQN has no reverse domain name after the date")
	}
	for label := range strings.SplitSeq(domain, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("NQN domain %q has an empty or over-long label", domain)
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isAlnum(c) && c != '-' {
				return fmt.Errorf("NQN domain %q has %q; only letters, digits and '-' are allowed", domain, c)
			}
		}
	}
	if hasUser && user == "" {
		return fmt.Errorf(`NQN ends with ":" and nothing after it`)
	}
	if u, ok := strings.CutPrefix(nqn, uuidNQNPrefix); ok {
		if _, err := parseUUID(u); err != nil {
			return fmt.Errorf("UUID NQN: %w", err)
		}
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// parseUUID accepts the canonical 8-4-4-4-12 hex form (any case) and returns
// it in the lower-case form the kernel prints with %pUb.
func parseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("UUID %q is not 36 characters (8-4-4-4-12 hex)", s)
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return "", fmt.Errorf("UUID %q lacks '-' at offset %d", s, i)
			}
		default:
			if !isHex(s[i]) {
				return "", fmt.Errorf("UUID %q has non-hex %q at offset %d", s, s[i], i)
			}
		}
	}
	return strings.ToLower(s), nil
}

// parseNGUID accepts what nvmet's device_nguid store accepts (16 hex byte
// pairs, each optionally followed by '-' or ':') and returns the form the
// kernel shows (%pUb: 8-4-4-4-12 lower-case hex).
func parseNGUID(s string) (string, error) {
	var b [16]byte
	p := 0
	for i := range b {
		if p+2 > len(s) || !isHex(s[p]) || !isHex(s[p+1]) {
			return "", fmt.Errorf("NGUID %q needs 16 hex byte pairs", s)
		}
		if _, err := hex.Decode(b[i:i+1], []byte(s[p:p+2])); err != nil {
			return "", fmt.Errorf("NGUID %q: %w", s, err)
		}
		p += 2
		if p < len(s) && (s[p] == '-' || s[p] == ':') {
			p++
		}
	}
	if p != len(s) {
		return "", fmt.Errorf("NGUID %q has trailing characters", s)
	}
	return formatUUIDBytes(b), nil
}

func formatUUIDBytes(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

const zeroUUID = "00000000-0000-0000-0000-000000000000"

func checkPrintable(field, v string, maxLen int) error {
	if v == "" || len(v) > maxLen {
		return invalidf(field, "%q must be 1 to %d bytes", v, maxLen)
	}
	for i := 0; i < len(v); i++ {
		// nvmet_is_ascii: 0x20-0x7e.
		if v[i] < 0x20 || v[i] > 0x7e {
			return invalidf(field, "%q has byte %#x; only printable ASCII is allowed", v, v[i])
		}
	}
	return nil
}

// parseVersion accepts what attr_version accepts ("major.minor" or
// "major.minor.tertiary") and returns the form the kernel shows back: the
// tertiary number is shown only when it is not zero.
func parseVersion(v string) (string, error) {
	parts := strings.Split(v, ".")
	if len(parts) != 2 && len(parts) != 3 {
		return "", fmt.Errorf("version %q is not major.minor[.tertiary]", v)
	}
	limits := []int{0xffff, 0xff, 0xff} // NVME_VS packs 16.8.8 bits
	n := make([]int, len(parts))
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || !isDigits(p) || x > limits[i] {
			return "", fmt.Errorf("version %q: part %q is not a number from 0 to %d", v, p, limits[i])
		}
		n[i] = x
	}
	if len(n) == 3 && n[2] != 0 {
		return fmt.Sprintf("%d.%d.%d", n[0], n[1], n[2]), nil
	}
	return fmt.Sprintf("%d.%d", n[0], n[1]), nil
}

// normalizeAddress validates a port address and returns it in canonical form
// (IP literals as net/netip prints them, IPv4-mapped IPv6 addresses as the
// IPv4 address they are), which is also what port identity is compared on.
func normalizeAddress(field string, a Address) (Address, error) {
	if !slices.Contains(trTypes, a.TrType) {
		return a, invalidf(field+".TrType", "%q is not one of %v", a.TrType, trTypes)
	}
	if !slices.Contains(adrFams, a.AdrFam) {
		return a, invalidf(field+".AdrFam", "%q is not one of %v", a.AdrFam, adrFams)
	}
	if len(a.TrAddr) > maxTrAddrLen || strings.ContainsFunc(a.TrAddr, isSpaceOrCtl) {
		return a, invalidf(field+".TrAddr", "%q must be at most %d bytes without spaces", a.TrAddr, maxTrAddrLen)
	}
	if len(a.TrSvcID) > maxTrSvcIDLen || strings.ContainsFunc(a.TrSvcID, isSpaceOrCtl) {
		return a, invalidf(field+".TrSvcID", "%q must be at most %d bytes without spaces", a.TrSvcID, maxTrSvcIDLen)
	}
	if !slices.Contains(ipTrType, a.TrType) {
		return a, nil
	}
	// nvmet-tcp and nvmet-rdma parse traddr/trsvcid with
	// inet_pton_with_scope when the port is enabled; catch the mistakes
	// here, where the error can name the field.
	ip, err := netip.ParseAddr(a.TrAddr)
	if err != nil {
		return a, invalidf(field+".TrAddr", "%q is not an IP address: %v", a.TrAddr, err)
	}
	switch {
	case a.AdrFam == "ipv4" && !ip.Is4():
		return a, invalidf(field+".TrAddr", "%q is not an IPv4 address", a.TrAddr)
	case a.AdrFam == "ipv6" && !ip.Is6():
		return a, invalidf(field+".TrAddr", "%q is not an IPv6 address", a.TrAddr)
	case a.AdrFam != "ipv4" && a.AdrFam != "ipv6":
		return a, invalidf(field+".AdrFam", "%q: transport %s needs ipv4 or ipv6", a.AdrFam, a.TrType)
	}
	if a.AdrFam == "ipv6" && ip.Is4In6() {
		// A socket bound to ::ffff:a.b.c.d is bound to a.b.c.d: the
		// two spellings are one listener (the second port to enable
		// would fail with EADDRINUSE), so they are one port here too.
		a.AdrFam, ip = "ipv4", ip.Unmap()
	}
	a.TrAddr = ip.String()
	if p, err := strconv.ParseUint(a.TrSvcID, 10, 16); err != nil || p == 0 || !isDigits(a.TrSvcID) {
		return a, invalidf(field+".TrSvcID", "%q is not a port number from 1 to 65535", a.TrSvcID)
	}
	// The transports parse trsvcid with kstrtou16(s, 0) when the port is
	// enabled (inet_pton_with_scope): a leading zero makes it octal, so
	// "06123" listens on 3155 and "09123" fails the link with EINVAL.
	if a.TrSvcID[0] == '0' {
		return a, invalidf(field+".TrSvcID", "%q has a leading zero, which the kernel reads as octal", a.TrSvcID)
	}
	return a, nil
}

// canonicalAddress is normalizeAddress for addresses read back from the
// kernel, which may have been written by other tools: anything that does not
// validate is compared as written.
func canonicalAddress(a Address) Address {
	if n, err := normalizeAddress("", a); err == nil {
		return n
	}
	return a
}

func isSpaceOrCtl(r rune) bool { return r <= ' ' || r == 0x7f }

// normalize validates an Export and returns a copy in canonical form: sorted
// namespaces, hosts and ports; canonical UUIDs, NGUIDs, versions and IP
// literals. Apply works on that copy only.
func (e Export) normalize() (Export, error) {
	n := e
	if err := ValidateNQN(e.NQN); err != nil {
		return n, err
	}
	a := &n.Attrs
	if a.Serial != "" {
		if err := checkPrintable("Attrs.Serial", a.Serial, maxSerialLen); err != nil {
			return n, err
		}
		// The kernel pads the serial with spaces to 20 bytes and shows
		// the padding, so trailing spaces could never be read back.
		if strings.HasSuffix(a.Serial, " ") {
			return n, invalidf("Attrs.Serial", "%q ends with a space", a.Serial)
		}
	}
	if a.Model != "" {
		if err := checkPrintable("Attrs.Model", a.Model, maxModelLen); err != nil {
			return n, err
		}
	}
	if a.Version != "" {
		v, err := parseVersion(a.Version)
		if err != nil {
			return n, invalidf("Attrs.Version", "%s", err)
		}
		a.Version = v
	}
	if a.CntlIDMin > maxCntlID || a.CntlIDMax > maxCntlID {
		return n, invalidf("Attrs.CntlIDMin/CntlIDMax", "%d/%d: controller IDs above %#x are reserved", a.CntlIDMin, a.CntlIDMax, maxCntlID)
	}
	if a.CntlIDMin != 0 && a.CntlIDMax != 0 && a.CntlIDMin >= a.CntlIDMax {
		return n, invalidf("Attrs.CntlIDMin/CntlIDMax", "min %d must be below max %d", a.CntlIDMin, a.CntlIDMax)
	}
	if a.QIDMax > maxQID {
		return n, invalidf("Attrs.QIDMax", "%d is more than %d", a.QIDMax, maxQID)
	}

	n.Namespaces = slices.Clone(e.Namespaces)
	slices.SortFunc(n.Namespaces, func(x, y Namespace) int { return cmpUint(x.NSID, y.NSID) })
	for i := range n.Namespaces {
		ns := &n.Namespaces[i]
		f := fmt.Sprintf("Namespaces[nsid=%d]", ns.NSID)
		if ns.NSID == 0 || ns.NSID == nsidAll {
			return n, invalidf(f+".NSID", "%d is reserved; use 1 to %d", ns.NSID, uint32(nsidAll-1))
		}
		if i > 0 && n.Namespaces[i-1].NSID == ns.NSID {
			return n, invalidf(f+".NSID", "NSID %d appears twice", ns.NSID)
		}
		// device_path keeps the bytes up to the first newline
		// (strcspn), so a newline would silently change the path.
		if !strings.HasPrefix(ns.DevicePath, "/") || len(ns.DevicePath) > maxAttrLen ||
			strings.ContainsAny(ns.DevicePath, "\x00\n") {
			return n, invalidf(f+".DevicePath", "%q must be an absolute path without NUL or newline", ns.DevicePath)
		}
		if ns.DeviceUUID != "" {
			u, err := parseUUID(ns.DeviceUUID)
			if err != nil {
				return n, invalidf(f+".DeviceUUID", "%s", err)
			}
			ns.DeviceUUID = clearZero(u)
		}
		if ns.DeviceNGUID != "" {
			g, err := parseNGUID(ns.DeviceNGUID)
			if err != nil {
				return n, invalidf(f+".DeviceNGUID", "%s", err)
			}
			ns.DeviceNGUID = clearZero(g)
		}
		if ns.ANAGroupID > maxANAGroupID {
			return n, invalidf(f+".ANAGroupID", "%d is more than %d", ns.ANAGroupID, maxANAGroupID)
		}
	}

	n.Ports = slices.Clone(e.Ports)
	for i := range n.Ports {
		p, err := normalizeAddress(fmt.Sprintf("Ports[%d]", i), n.Ports[i])
		if err != nil {
			return n, err
		}
		n.Ports[i] = p
	}
	slices.SortFunc(n.Ports, compareAddress)
	for i := 1; i < len(n.Ports); i++ {
		if n.Ports[i] == n.Ports[i-1] {
			return n, invalidf("Ports", "address %s appears twice", n.Ports[i])
		}
	}

	n.AllowedHosts = slices.Clone(e.AllowedHosts)
	slices.Sort(n.AllowedHosts)
	for i, h := range n.AllowedHosts {
		if err := checkNQN(h); err != nil {
			return n, invalidf("AllowedHosts", "%q: %s", h, err)
		}
		if i > 0 && n.AllowedHosts[i-1] == h {
			return n, invalidf("AllowedHosts", "host %q appears twice", h)
		}
	}
	// nvmet refuses allowed_hosts links while attr_allow_any_host is 1 and
	// attr_allow_any_host=1 while links exist (EINVAL both ways).
	if a.AllowAnyHost && len(n.AllowedHosts) > 0 {
		return n, invalidf("AllowedHosts", "must be empty when Attrs.AllowAnyHost is true")
	}
	return n, nil
}

func clearZero(u string) string {
	if u == zeroUUID {
		return ""
	}
	return u
}

func cmpUint[T ~uint16 | ~uint32](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareAddress(x, y Address) int {
	return strings.Compare(x.key(), y.key())
}
