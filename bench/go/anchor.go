// The anchor: RabbitMQ's official Go client (amqp091-go) doing what the SDK's hot paths do,
// so that bench/anchor.py can say how far the SDK is from what the hardware and the broker
// allow. It is built from Debian's packages only (golang-go and
// golang-github-rabbitmq-amqp091-go-dev), in GOPATH mode, by bench/anchor.py on first use:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o anchor bench/go/anchor.go
//
// Modes (one run each, then one JSON line on stdout):
//
//	anchor -mode publish -url URL -queue Q -n N -size S -window W
//	    N persistent messages of S bytes to the default exchange, routed to Q, with publisher
//	    confirms and at most W unconfirmed (the window refilled on every confirm); mandatory
//	    and a 36-character message id per message, as the SDK's publisher sends them.
//	    Timed from the first publish to the last confirm.
//	anchor -mode consume -url URL -queue Q -n N -prefetch P -ack-every K
//	    N deliveries from Q with prefetch P, acking every K-th (multiple) and the last;
//	    timed from the first delivery to the answer of a passive queue.declare sent after
//	    the last ack (the broker processes a channel's frames in order: every ack is in).
//
// The JSON line: {"mode", "msgs", "seconds", "msg_per_s", "cpu_s", "nacks"}; cpu_s is this
// process's user + system CPU (getrusage) over the timed interval.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type result struct {
	Mode    string  `json:"mode"`
	Msgs    int     `json:"msgs"`
	Seconds float64 `json:"seconds"`
	MsgPerS float64 `json:"msg_per_s"`
	CPUS    float64 `json:"cpu_s"`
	Nacks   int     `json:"nacks"`
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "anchor: "+format+"\n", args...)
	os.Exit(1)
}

// messageID is a random id of the SDK's length (a UUID's 36 characters).
func messageID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		fail("random: %v", err)
	}
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

type stopwatch struct {
	wall time.Time
	cpu  float64
}

func start() stopwatch { return stopwatch{time.Now(), cpuSeconds()} }

func (s stopwatch) result(mode string, n, nacks int) result {
	seconds := time.Since(s.wall).Seconds()
	return result{Mode: mode, Msgs: n, Seconds: seconds, MsgPerS: float64(n) / seconds,
		CPUS: cpuSeconds() - s.cpu, Nacks: nacks}
}

func publish(ch *amqp.Channel, queue string, n, size, window int) result {
	if err := ch.Confirm(false); err != nil {
		fail("confirm.select: %v", err)
	}
	// One confirmation per message, in order (the library splits multiple acks); the
	// buffer holds a whole window, so the reader never waits for this loop.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window+1))
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	ids := make([]string, n) // made before timing, as the SDK's publish_many takes its ids at once
	for i := range ids {
		ids[i] = messageID()
	}
	inflight, settled, nacks := 0, 0, 0
	settle := func() {
		c, ok := <-confirms
		if !ok {
			fail("channel closed while waiting for confirms")
		}
		inflight--
		settled++
		if !c.Ack {
			nacks++
		}
	}
	watch := start()
	for i := 0; i < n; i++ {
		for inflight >= window {
			settle()
		}
		err := ch.Publish("", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: ids[i], Body: body})
		if err != nil {
			fail("publish: %v", err)
		}
		inflight++
	}
	for settled < n {
		settle()
	}
	return watch.result("publish", n, nacks)
}

func consume(ch *amqp.Channel, queue string, n, prefetch, ackEvery int) result {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		fail("basic.qos: %v", err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		fail("basic.consume: %v", err)
	}
	var watch stopwatch
	count := 0
	for d := range deliveries {
		if count == 0 {
			watch = start()
		}
		count++
		if count%ackEvery == 0 || count == n {
			if err := d.Ack(true); err != nil {
				fail("basic.ack: %v", err)
			}
		}
		if count == n {
			break
		}
	}
	if count < n {
		fail("deliveries ended after %d of %d", count, n)
	}
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		fail("queue.declare (passive): %v", err)
	}
	return watch.result("consume", n, 0)
}

func main() {
	mode := flag.String("mode", "", "publish or consume")
	url := flag.String("url", "", "amqp:// URL of the node to connect to")
	queue := flag.String("queue", "", "the queue (declared beforehand)")
	n := flag.Int("n", 30000, "messages")
	size := flag.Int("size", 256, "message body bytes (publish)")
	window := flag.Int("window", 1000, "max unconfirmed publishes")
	prefetch := flag.Int("prefetch", 1000, "consumer prefetch")
	ackEvery := flag.Int("ack-every", 100, "ack (multiple) every K deliveries")
	flag.Parse()
	if *url == "" || *queue == "" || *n <= 0 || *size < 0 || *window <= 0 || *prefetch <= 0 ||
		*ackEvery <= 0 {
		fail("need -url, -queue and positive -n, -window, -prefetch, -ack-every")
	}
	conn, err := amqp.Dial(*url)
	if err != nil {
		fail("connect: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		fail("channel: %v", err)
	}
	var r result
	switch *mode {
	case "publish":
		r = publish(ch, *queue, *n, *size, *window)
	case "consume":
		r = consume(ch, *queue, *n, *prefetch, *ackEvery)
	default:
		fail("-mode must be publish or consume, not %q", *mode)
	}
	if err := conn.Close(); err != nil {
		fail("close: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fail("output: %v", err)
	}
}
