package app

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
)

// Voucher is one voucher of the demo's catalog: what GET /api/vouchers
// lists and GET /api/vouchers/:id/claim claims.
type Voucher struct {
	// ID is the voucher's id, the :id of its claim route.
	ID uint64 `json:"id"`
	// Merchant is the shop that honours the voucher.
	Merchant string `json:"merchant"`
	// Name says what the voucher gives.
	Name string `json:"name"`
}

// Vouchers returns the demo's catalog, by increasing id: the only vouchers
// there are. It is a function, not a package-level slice, so that nothing
// can change the catalog after start-up; each call returns a fresh slice.
func Vouchers() []Voucher {
	return []Voucher{
		{ID: 7, Merchant: "Coffee Corner", Name: "Free pastry with any coffee"},
		{ID: 8, Merchant: "Noodle House", Name: "20% off any noodle bowl"},
		{ID: 9, Merchant: "Book Nook", Name: "5 off a book over 30"},
		{ID: 10, Merchant: "Coffee Corner", Name: "Second coffee half price"},
	}
}

// catalog holds the vouchers of [Vouchers] by their id written the one
// canonical way (decimal, no sign, no leading zero), the form a claim's
// :id must take. It is made once, by newCatalog, and only read afterwards.
type catalog map[string]Voucher

func newCatalog(vs []Voucher) catalog {
	c := make(catalog, len(vs))
	for _, v := range vs {
		c[strconv.FormatUint(v.ID, 10)] = v
	}
	return c
}

// requireVoucher answers 404 {"code":404,"message":"Voucher not found"} to
// a claim whose :id names no voucher of the catalog, before the voucher
// claim limit runs. The limit counts per :id, a value the client chooses,
// so without this check every made-up id would get a Redis key of its own
// that lives for the whole 24 h window. The match is on the exact text, so
// "07", "+7" and "7.0" are not voucher 7: only one spelling of an id is
// ever counted. It calls no Redis.
func (h *handlers) requireVoucher(c *gin.Context) {
	if _, ok := h.vouchers[c.Param("id")]; !ok {
		abortWith(c, http.StatusNotFound, "Voucher not found")
	}
}

// listVouchers answers GET /api/vouchers with the catalog. It touches no
// Redis.
func (h *handlers) listVouchers(c *gin.Context) {
	reply(c, http.StatusOK, "Voucher list", gin.H{"vouchers": Vouchers()})
}
