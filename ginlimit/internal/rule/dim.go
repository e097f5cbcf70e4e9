package rule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// Dim is what a Dimension of the public package stands for.
type Dim struct {
	Kind  Kind
	Name  string // the parameter, header or function name
	Label string // what the key calls it: "user", "ip", "p.<name>", "h.<name>", "f.<name>"
	Fn    func(*gin.Context) (string, bool)
	Anon  bool  // UserOrIP: a request without an identity counts per IP
	Err   error // a constructor's complaint, reported by Per
}

// Kind is which sort of dimension a Dim is.
type Kind int

// The kinds of dimensions.
const (
	KindUser Kind = iota + 1
	KindIP
	KindParam
	KindHeader
	KindFunc
	KindMethod // the whole route: no part of the key
	KindShared // the whole group: the key's scope is SharedRoute's
)

// Builtin is the dimension of the public package's n-th constant that
// takes no argument: Method, IP, User, UserOrIP, Shared.
func Builtin(n int) Dim {
	switch n {
	case 0:
		return Dim{Kind: KindMethod}
	case 1:
		return Dim{Kind: KindIP, Label: "ip"}
	case 2:
		return Dim{Kind: KindUser, Label: "user"}
	case 3:
		return Dim{Kind: KindUser, Label: "user", Anon: true}
	case 4:
		return Dim{Kind: KindShared, Label: "shared"}
	}
	return Dim{Err: fmt.Errorf("Builtin(%d): want Method, IP, User, UserOrIP or Shared", n)}
}

// Param is ByParam's dimension.
func Param(name string) Dim {
	return Dim{Kind: KindParam, Name: name, Label: "p." + Escape(name, IDSafe), Err: CheckName("ByParam", name)}
}

// Header is ByHeader's dimension.
func Header(name string) Dim {
	canon := http.CanonicalHeaderKey(name)
	return Dim{Kind: KindHeader, Name: canon, Label: "h." + Escape(strings.ToLower(canon), IDSafe), Err: CheckName("ByHeader", name)}
}

// Func is ByFunc's dimension.
func Func(name string, f func(c *gin.Context) (value string, ok bool)) Dim {
	err := CheckName("ByFunc", name)
	if err == nil && f == nil {
		err = fmt.Errorf("ByFunc(%q, nil): the function must not be nil", name)
	}
	return Dim{Kind: KindFunc, Name: name, Label: "f." + Escape(name, IDSafe), Fn: f, Err: err}
}

// MaxDims is the most dimensions one rule counts per.
const MaxDims = 4

// CheckName checks the name given to a dimension constructor.
func CheckName(what, name string) error {
	if name == "" || len(name) > 64 || !PrintableASCII(name) || strings.ContainsAny(name, " {}") {
		return fmt.Errorf("%s(%q): want a name of 1 to 64 printable ASCII bytes, without spaces or braces", what, name)
	}
	return nil
}

// Describe returns how the dimension was made, such as
// `ByHeader("X-Api-Key")`, for errors.
func (d Dim) Describe() string {
	switch d.Kind {
	case KindUser:
		if d.Anon {
			return "UserOrIP"
		}
		return "User"
	case KindIP:
		return "IP"
	case KindMethod:
		return "Method"
	case KindShared:
		return "Shared"
	case KindParam:
		return fmt.Sprintf("ByParam(%q)", d.Name)
	case KindHeader:
		return fmt.Sprintf("ByHeader(%q)", d.Name)
	case KindFunc:
		return fmt.Sprintf("ByFunc(%q)", d.Name)
	}
	return "a nil Dimension"
}

// SetDims sets r's dimensions for the option what.
func SetDims(r *Common, what string, dims []Dim) error {
	if len(dims) > MaxDims {
		return fmt.Errorf("%s: %d dimensions, want at most %d", what, len(dims), MaxDims)
	}
	ds := make([]Dim, 0, len(dims))
	anon, shared := false, false
	for i, d := range dims {
		switch {
		case d.Err != nil:
			return fmt.Errorf("%s: %w", what, d.Err)
		case d.Kind == 0:
			return fmt.Errorf("%s: dimension %d is the zero value: give Method, IP, User, UserOrIP, Shared, or one of ByParam, ByHeader or ByFunc", what, i+1)
		case d.Kind == KindMethod && len(dims) > 1:
			return fmt.Errorf("%s: Method counts the whole route: give it alone", what)
		case d.Kind == KindMethod:
			continue
		case d.Kind == KindShared && shared:
			return fmt.Errorf("%s: Shared is given twice", what)
		case d.Kind == KindShared:
			shared = true
			continue
		}
		for _, e := range ds {
			switch {
			case e.Label == d.Label:
				return fmt.Errorf("%s: %s is given twice", what, d.Describe())
			case d.Name != "" && e.Name == d.Name:
				// Target.Values is keyed by the name: one name for two
				// dimensions would make a count no Target can name.
				return fmt.Errorf("%s: %s and %s share the name %q, which Target.Values keys them by: give each its own", what, e.Describe(), d.Describe(), d.Name)
			}
		}
		anon = anon || d.Anon
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		ds = nil
	}
	r.Dims, r.AnonByIP, r.Shared = ds, anon, shared
	return nil
}

// Missing is the error of a request that lacks the value of one of the
// rule's dimensions.
type Missing struct{ D Dim }

func (e Missing) Error() string { return "the request has no value for " + e.D.Describe() }

// Body400 is the 400 body of a request that lacks d's value.
func (d Dim) Body400() string {
	msg := "Bad request"
	if d.Kind == KindHeader {
		msg = "Missing " + d.Name + " header"
	}
	b, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{http.StatusBadRequest, msg})
	return string(b)
}
