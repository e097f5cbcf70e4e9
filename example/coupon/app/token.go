package app

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

// AdminRole is the value of the "role" claim that the admin API requires.
const AdminRole = "admin"

// RoleClaim is the name of the token claim that carries the user's role.
const RoleClaim = "role"

// claims are the claims of the demo's tokens: the registered ones, and a
// role when there is one.
type claims struct {
	Role string `json:"role,omitempty"`
	jwt.RegisteredClaims
}

// NewToken returns an HS256 token signed with secret for userID, issued at
// now and valid for [TokenTTL], with role as its "role" claim when role is
// not empty. POST /api/login mints tokens without a role; the command's
// "token" subcommand mints them with one, for whoever holds the secret.
//
// userID must be 1 to [MaxUserIDLen] bytes, and secret at least
// identity.MinHMACSecretLen bytes, as [New] requires of the secret that
// verifies the token.
func NewToken(secret []byte, userID, role string, now time.Time) (string, error) {
	switch {
	case userID == "":
		return "", errors.New("coupon: token: the user id is empty")
	case len(userID) > MaxUserIDLen:
		return "", errors.New("coupon: token: the user id is longer than " + strconv.Itoa(MaxUserIDLen) + " bytes")
	case len(secret) < identity.MinHMACSecretLen:
		return "", fmt.Errorf("coupon: token: the secret is shorter than %d bytes", identity.MinHMACSecretLen)
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		Role: role,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   userID,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(TokenTTL)),
		},
	}).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("coupon: token: %w", err)
	}
	return token, nil
}
