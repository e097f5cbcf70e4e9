package ginlimit

import (
	"strings"
	"unsafe"
)

// The Redis key of a decision is
//
//	<prefix>{<METHOD> <route template>[ <dimension>]}
//
// where the dimension is "ip:<addr>" or "user:<id>". The braces are the
// Redis Cluster hash tag, so every key of one route and identity hashes to
// one slot. Route templates and user ids are escaped: '%', '{', '}', spaces
// and non-printable bytes become %XX, and user ids keep only unreserved
// characters, so no identity can spell another identity's key and nothing can
// close the hash tag early. IP addresses are canonical netip text and need no
// escaping.

const hexDigits = "0123456789ABCDEF"

// routeSafe reports whether b stands for itself in the route part of a key.
func routeSafe(b byte) bool {
	return b > ' ' && b < 0x7f && b != '%' && b != '{' && b != '}'
}

// idSafe reports whether b stands for itself in a user id.
func idSafe(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-._~@:+=", b) >= 0
}

// escapedLen returns the length of s once escaped with safe.
func escapedLen(s string, safe func(byte) bool) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !safe(s[i]) {
			n += 2
		}
	}
	return n
}

// writeEscaped writes s to b, percent-encoding every byte that is not safe.
func writeEscaped(b *strings.Builder, s string, safe func(byte) bool) {
	start := 0
	for i := 0; i < len(s); i++ {
		if safe(s[i]) {
			continue
		}
		b.WriteString(s[start:i])
		b.WriteByte('%')
		b.WriteByte(hexDigits[s[i]>>4])
		b.WriteByte(hexDigits[s[i]&0xf])
		start = i + 1
	}
	b.WriteString(s[start:])
}

func containsAny(s, chars string) bool { return strings.ContainsAny(s, chars) }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// defaultName derives a rule name from a key prefix: "coupon:claim:" gives
// "coupon:claim". Bytes that are not printable ASCII become '_'.
func defaultName(prefix string) string {
	name := strings.TrimRight(prefix, ":")
	if name == "" {
		return "default"
	}
	b := []byte(name)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b)
}

// sfString quotes s as an RFC 8941 structured-field string.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// unsafeString views b as a string without copying. The caller must not
// modify b while the string is in use; requestKey copies it into the key
// before its buffer goes out of scope.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
