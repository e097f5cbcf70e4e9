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
