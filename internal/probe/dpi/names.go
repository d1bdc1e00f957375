// SPDX-License-Identifier: Apache-2.0

package dpi

import "strings"

// Canonical application names of the built-in classifier. nDPI reports many
// more; Canonical maps its names to the same spelling.
const (
	AppUnknown = "unknown"
	AppDNS     = "dns"
	AppHTTP    = "http"
	AppTLS     = "tls"
	AppQUIC    = "quic"
	AppSSH     = "ssh"
	AppNTP     = "ntp"
	AppDHCP    = "dhcp"
	AppSMTP    = "smtp"
	AppIMAP    = "imap"
	AppPOP3    = "pop3"
	AppFTP     = "ftp"
)

// Categories: nDPI's category names (ndpi_category_get_name), lower-case.
const (
	CatUnspecified  = "unspecified"
	CatWeb          = "web"
	CatNetwork      = "network"
	CatSystem       = "system"
	CatRemoteAccess = "remoteaccess"
	CatEmail        = "email"
	CatDownload     = "download"
)

// category of the built-in applications, as nDPI 4.2 files them.
var category = map[string]string{
	AppUnknown: CatUnspecified,
	AppDNS:     CatNetwork,
	AppHTTP:    CatWeb,
	AppTLS:     CatWeb,
	AppQUIC:    CatWeb,
	AppSSH:     CatRemoteAccess,
	AppNTP:     CatSystem,
	AppDHCP:    CatNetwork,
	AppSMTP:    CatEmail,
	AppIMAP:    CatEmail,
	AppPOP3:    CatEmail,
	AppFTP:     CatDownload,
}

// nDPI names that do not become ours by lower-casing alone.
var ndpiAlias = map[string]string{
	"ftp_control": AppFTP,
	"mail_pop":    AppPOP3,
	"mail_smtp":   AppSMTP,
	"mail_imap":   AppIMAP,
}

// Canonical turns an application or category name as nDPI spells it
// ("TLS", "BitTorrent", "DoH_DoT", "RemoteAccess") into the
// form verdicts and policies use: lower-case, '_' and ' ' as '-'.
func Canonical(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := ndpiAlias[n]; ok {
		return a
	}
	if n == "" {
		return AppUnknown
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r == ' ' {
			return '-'
		}
		return r
	}, n)
}

// verdictFor is a built-in classifier's verdict for app.
func verdictFor(app, host string, src Source) Verdict {
	c, ok := category[app]
	if !ok {
		c = CatUnspecified
	}
	return Verdict{Done: true, App: app, Proto: app, Category: c, Host: normHost(host), Source: src}
}

// normHost lower-cases a host name and drops a trailing dot; names with
// bytes that cannot be in a host name are dropped rather than passed on
// to logs and policies.
func normHost(h string) string {
	h = strings.TrimSuffix(h, ".")
	if len(h) > 253 {
		return ""
	}
	b := []byte(h)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.', c == '_', c == ':', c == '[', c == ']':
		default:
			return ""
		}
	}
	return string(b)
}

// portGuess is the application of well-known ports, used only at give-up
// (as nDPI's ndpi_detection_giveup guesses).
func portGuess(proto uint8, lo, hi uint16) string {
	for _, p := range [2]uint16{lo, hi} {
		if a := wellKnown(proto, p); a != "" {
			return a
		}
	}
	return ""
}

func wellKnown(proto uint8, port uint16) string {
	switch proto {
	case protoTCP:
		switch port {
		case 53:
			return AppDNS
		case 80, 8080:
			return AppHTTP
		case 443:
			return AppTLS
		case 22:
			return AppSSH
		case 25, 587:
			return AppSMTP
		case 143:
			return AppIMAP
		case 110:
			return AppPOP3
		case 21:
			return AppFTP
		}
	case protoUDP:
		switch port {
		case 53, 5353:
			return AppDNS
		case 123:
			return AppNTP
		case 67, 68:
			return AppDHCP
		case 443:
			return AppQUIC
		}
	}
	return ""
}
