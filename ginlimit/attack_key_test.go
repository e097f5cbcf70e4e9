package ginlimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestAttackShortValueSpellsLongValuesHash: a value longer than maxKeyText
// goes into the key hashed. It once went in as "~" and 32 hex digits, which
// a short value could spell ('~' and hex digits stand for themselves in a
// key), sharing the long value's count; the hashed form now starts with a
// bare '%', which no escaped value contains, and this short value keeps a
// count of its own.
func TestAttackShortValueSpellsLongValuesHash(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Per(ByHeader("X-Key"))), ok)
	long := strings.Repeat("k", maxKeyText+1)
	sum := sha256.Sum256([]byte(long))
	short := "~" + hex.EncodeToString(sum[:16])
	if w := do(e, http.MethodGet, "/x", map[string]string{"X-Key": long}); w.Code != http.StatusOK {
		t.Fatalf("the long value: %d", w.Code)
	}
	if w := do(e, http.MethodGet, "/x", map[string]string{"X-Key": short}); w.Code != http.StatusOK {
		t.Errorf("X-Key %q shares the count of a %d-byte value: %d, want 200", short, len(long), w.Code)
	}
}

// TestAttackHashedPartsAreNotInjective: with HashIdentities, several
// dimensions are sealed into one HMAC. Of " <label>:<value>" per part, with
// the values unescaped, A="x h.b:y", B="z" and A="x", B="y h.b:z" hashed
// alike and shared one count; each value's length now goes before it, and
// they stay apart.
func TestAttackHashedPartsAreNotInjective(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	e := gin.New()
	e.GET("/x", testLimit(Redis(c), Key(prefix(t)), Limit(1), Per(ByHeader("A"), ByHeader("B")), HashIdentities(secret)), ok)
	if w := do(e, http.MethodGet, "/x", map[string]string{"A": "x h.b:y", "B": "z"}); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	if w := do(e, http.MethodGet, "/x", map[string]string{"A": "x", "B": "y h.b:z"}); w.Code != http.StatusOK {
		t.Errorf("A=\"x\" B=\"y h.b:z\" shares the count of A=\"x h.b:y\" B=\"z\": %d, want 200", w.Code)
	}
}
