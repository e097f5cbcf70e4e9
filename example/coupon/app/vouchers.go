package app

import (
	"net/http"

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

// listVouchers answers GET /api/vouchers with the catalog. It touches no
// Redis.
func (h *handlers) listVouchers(c *gin.Context) {
	reply(c, http.StatusOK, "Voucher list", gin.H{"vouchers": Vouchers()})
}
