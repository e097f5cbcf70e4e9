package main

import (
	"math"
	"testing"
	"time"
)

func TestHistogramBucketsAreContiguousAndPrecise(t *testing.T) {
	for v := uint64(1); v < 1<<20; v++ {
		if d := histIndex(v) - histIndex(v-1); d != 0 && d != 1 {
			t.Fatalf("histIndex(%d) - histIndex(%d) = %d: buckets are not contiguous", v, v-1, d)
		}
		if got := histValue(histIndex(v)); math.Abs(float64(got)-float64(v)) > float64(v)/histHalf+1 {
			t.Fatalf("histValue(histIndex(%d)) = %d: more than 1/%d off", v, got, histHalf)
		}
	}
	if i := histIndex(math.MaxInt64); i >= histBuckets {
		t.Fatalf("histIndex(MaxInt64) = %d, want < %d", i, histBuckets)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(c.q)
		if math.Abs(float64(got-c.want)) > float64(c.want)/histHalf {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d", c.q, got, c.want, histHalf)
		}
	}
	o := newHistogram()
	o.merge(h)
	if o.n != 1000 || o.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merged histogram: n = %d, p50 = %v; want 1000, %v", o.n, o.quantile(0.5), h.quantile(0.5))
	}
}

func TestSelectCases(t *testing.T) {
	cs, withHTTP, err := selectCases("ginlimit, redis_rate,http")
	if err != nil || len(cs) != 2 || !withHTTP || cs[0].ID != "redis_rate" || cs[1].ID != "ginlimit" {
		t.Fatalf("selectCases = %v, %v, %v; want redis_rate and ginlimit in report order, with http", cs, withHTTP, err)
	}
	if _, _, err := selectCases("nope"); err == nil {
		t.Fatal("selectCases(nope): no error")
	}
}

func TestCasesCoverEveryAlgorithm(t *testing.T) {
	prefixes := map[string]string{}
	ids := map[string]bool{}
	for _, c := range allCases() {
		if ids[c.ID] {
			t.Errorf("case ID %q twice", c.ID)
		}
		ids[c.ID] = true
		if c.Floor {
			continue
		}
		p := c.RedisKey("x")
		if other, ok := prefixes[p]; ok {
			t.Errorf("cases %s and %s write the same Redis key %q", other, c.ID, p)
		}
		prefixes[p] = c.ID
		if c.FloodOnly && (!c.Flood || c.Memory || c.Floor) {
			t.Errorf("%s: FloodOnly must be in the flood only", c.ID)
		}
	}
	// Each ginlimit algorithm: in the throughput tables, the memory table and
	// the flood with the deny cache off, and in the flood with it on.
	for _, id := range []string{"ginlimit", "ginlimit-counter", "ginlimit-fixed", "ginlimit-bucket"} {
		cs, _, err := selectCases(id + "," + id + "-defaults")
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 2 || cs[0].FloodOnly || !cs[0].Memory || !cs[0].Flood || !cs[1].Flood {
			t.Errorf("%s: want a throughput, memory and flood case and a flood case with the defaults", id)
		}
	}
}
