// The partition of each key read from stdin (one per line, then the counts on the first
// line): the SDK's key placement written again from its docs, as a Go publisher would.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func jump(key uint64, buckets int64) int64 {
	var b, j int64 = -1, 0
	for j < buckets {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return b
}

func partitionOf(key string, count int64) int64 {
	sum := sha256.Sum256([]byte(key))
	return jump(binary.BigEndian.Uint64(sum[:8]), count)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	in.Scan()
	var counts []int64
	for _, field := range strings.Fields(in.Text()) {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			panic(err)
		}
		counts = append(counts, n)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		for i, n := range counts {
			if i > 0 {
				fmt.Fprint(out, " ")
			}
			fmt.Fprint(out, partitionOf(in.Text(), n))
		}
		fmt.Fprintln(out)
	}
}
