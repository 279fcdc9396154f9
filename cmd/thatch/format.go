package main

import "fmt"

// plural is one when n is 1, else many: fmt.Sprintf("%d %s", n, plural(n, "day", "days")).
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// formatUSD writes an amount in dollars with the precision small amounts need.
func formatUSD(v float64) string {
	if v >= 1 || v == 0 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}
