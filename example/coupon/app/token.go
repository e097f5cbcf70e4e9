package app

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ginlimit/ginlimit/identity"
)

// AdminRole is the value of the "role" claim that the admin API requires.
const AdminRole = "admin"

// RoleClaim is the name of the token claim that carries the user's role.
const RoleClaim = "role"

// Grants are what a token of [NewToken] grants besides its user id. The
// zero value grants nothing: no role, the default plan. POST /api/login
// mints only tokens with zero Grants, since anyone may log in as anyone.
type Grants struct {
	// Role becomes the token's [RoleClaim] when not empty; [AdminRole] opens
	// the admin API.
	Role string
	// Plan becomes the token's [PlanClaim] when not empty; it must be a plan
	// of the claim rule ([PlanVIP]).
	Plan string
}

// claims are the claims of the demo's tokens: the registered ones, and a
// role and a plan when there are.
type claims struct {
	Role string `json:"role,omitempty"`
	Plan string `json:"plan,omitempty"`
	jwt.RegisteredClaims
}

// NewToken returns an HS256 token signed with secret for userID, issued at
// now and valid for [TokenTTL], carrying g's role and plan as its "role" and
// "plan" claims when they are not empty. POST /api/login mints tokens with
// neither; the command's "token" subcommand mints them with either, for
// whoever holds the secret.
//
// userID must be 1 to [MaxUserIDLen] bytes, and secret at least
// identity.MinHMACSecretLen bytes, as [New] requires of the secret that
// verifies the token. g.Plan must be empty or a plan of the claim rule: a
// token with an unknown plan would silently get the default limit.
func NewToken(secret []byte, userID string, g Grants, now time.Time) (string, error) {
	if plans := claimPlans(); g.Plan != "" && plans[g.Plan] == 0 {
		return "", fmt.Errorf("coupon: token: unknown plan %q (want one of %q, or none)", g.Plan, slices.Sorted(maps.Keys(plans)))
	}
	switch {
	case userID == "":
		return "", errors.New("coupon: token: the user id is empty")
	case len(userID) > MaxUserIDLen:
		return "", errors.New("coupon: token: the user id is longer than " + strconv.Itoa(MaxUserIDLen) + " bytes")
	case len(secret) < identity.MinHMACSecretLen:
		return "", fmt.Errorf("coupon: token: the secret is shorter than %d bytes", identity.MinHMACSecretLen)
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		Role: g.Role,
		Plan: g.Plan,
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
