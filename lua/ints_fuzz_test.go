package lua

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// be returns v as size bytes, big-endian and two's complement: the
// scripts' packing (struct.pack's '>i8' for size 8).
func be(size int, v int64) string {
	b := make([]byte, size)
	for i := size - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return string(b)
}

// packedInts is ints packed as the scripts reply: 8 bytes each.
func packedInts(ints ...int64) string {
	var b strings.Builder
	for _, v := range ints {
		b.WriteString(be(8, v))
	}
	return b.String()
}

// fakeReply turns fuzz bytes into an array reply, as a fake answering in
// the scripts' place gives one: each element is a tag byte, then for an
// integer its 8 bytes (fewer at the end of the input). Tags other than 0
// make elements of the types Ints must refuse.
func fakeReply(data []byte) []any {
	var out []any
	for len(data) > 0 {
		tag := data[0] % 6
		data = data[1:]
		n := min(len(data), 8)
		var raw [8]byte
		copy(raw[8-n:], data[:n])
		v := int64(binary.BigEndian.Uint64(raw[:]))
		switch tag {
		case 0:
			out = append(out, v)
			data = data[n:]
		case 1:
			out = append(out, string(data[:n]))
			data = data[n:]
		case 2:
			out = append(out, nil)
		case 3:
			out = append(out, float64(v))
			data = data[n:]
		case 4:
			out = append(out, int(v)) // an int, not an int64: refused
			data = data[n:]
		case 5:
			out = append(out, []any{v})
			data = data[n:]
		}
	}
	return out
}

// FuzzInts: Ints decodes a packed string exactly when its length is a
// multiple of 8, into integers that pack back into the same bytes; an array
// exactly when every element is an int64, into those integers; anything
// else is an error, never a panic and never integers.
func FuzzInts(f *testing.F) {
	// TestPack's packed strings: four '>i8' integers (a reply), and the
	// 22 bytes of '>I7I7I4I4' (a key's state, not a reply).
	f.Add([]byte(packedInts(-1, -4294967297, 1<<53, 0)), []byte{0, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add([]byte(be(7, 1795418952522849)+be(7, 4503599627370495)+be(4, 4294967295)+be(4, 7)), []byte{1, 'x'})
	// TestReplyLayout's shapes: a single rule's reply (2 + 4 integers) and
	// several rules' (2 + 4n).
	f.Add([]byte(packedInts(1767322445000000, 0, 1, 4, 1000000, 0)), []byte{0, 1, 0, 2})
	f.Add([]byte(packedInts(1767322445000000, 2, 1, 4, 1000000, 0, 0, 0, 200000, 200000)), []byte{3, 5, 4, 1, 2})
	f.Add([]byte{}, []byte{})
	f.Add([]byte("ERR ginlimit: bad"), []byte{5, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, packed, elems []byte) {
		got, err := Ints(string(packed))
		switch {
		case len(packed)%8 != 0:
			if err == nil || got != nil {
				t.Fatalf("Ints(%d bytes) = %v, %v; want an error", len(packed), got, err)
			}
		case err != nil:
			t.Fatalf("Ints(%d bytes): %v; want %d integers", len(packed), err, len(packed)/8)
		case len(got) != len(packed)/8 || packedInts(got...) != string(packed):
			t.Fatalf("Ints(%q) = %v, which does not pack back into the reply", packed, got)
		}

		arr := fakeReply(elems)
		got, err = Ints(arr)
		bad := -1
		for i, v := range arr {
			if _, ok := v.(int64); !ok {
				bad = i
				break
			}
		}
		if bad >= 0 {
			if err == nil || got != nil {
				t.Fatalf("Ints(%#v) = %v, %v; want an error for element %d", arr, got, err, bad)
			}
			if want := fmt.Sprintf("element %d ", bad); !strings.Contains(err.Error(), want) {
				t.Fatalf("Ints(%#v): error %q does not name the first bad element (%d)", arr, err, bad)
			}
		} else {
			if err != nil || len(got) != len(arr) {
				t.Fatalf("Ints(%#v) = %v, %v; want its %d integers", arr, got, err, len(arr))
			}
			for i, v := range arr {
				if got[i] != v.(int64) {
					t.Fatalf("Ints(%#v)[%d] = %d, want %d", arr, i, got[i], v)
				}
			}
		}

		// A reply of any other type is refused.
		for _, other := range []any{nil, packed, int64(len(packed)), fmt.Errorf("%s", packed)} {
			if got, err := Ints(other); err == nil || got != nil {
				t.Fatalf("Ints(%T) = %v, %v; want an error", other, got, err)
			}
		}
	})
}
