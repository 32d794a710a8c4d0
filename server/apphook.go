package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/billsync/billsync/reconcile"
)

// MaxAppAnswerBytes bounds how much of an app's answer to a delivery is
// read (and then thrown away: only its status counts).
const MaxAppAnswerBytes = 64 << 10

// DefaultAppTimeout bounds one delivery attempt: the app answers quickly
// or the delivery is retried later.
const DefaultAppTimeout = 10 * time.Second

// AppSender signs and sends account changes to the app by the Standard
// Webhooks specification: headers webhook-id (chg_<change id>, the same
// on every attempt), webhook-timestamp and webhook-signature
// (v1,<base64 HMAC-SHA256 of "id.timestamp.body">), with the whsec_
// secret. It follows no redirect (a 3xx is a failed attempt) and reads at
// most MaxAppAnswerBytes of an answer, which it never logs.
type AppSender struct {
	signer  *standardwebhooks.Webhook
	client  *http.Client
	timeout time.Duration
}

// AppSenderConfig configures NewAppSender.
type AppSenderConfig struct {
	// Secret is BILLSYNC_APP_WEBHOOK_SECRET: whsec_<base64>.
	Secret string
	// Transport carries the requests; default http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds each attempt; default DefaultAppTimeout.
	Timeout time.Duration
}

// ParseAppSecret checks a whsec_<base64> secret (of at least 24 bytes).
// Its error never quotes the secret.
func ParseAppSecret(secret string) error {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return errors.New("the app webhook secret must look like whsec_<base64>")
	}
	if _, err := standardwebhooks.NewWebhook(raw); err != nil {
		return errors.New("the app webhook secret after whsec_ is not base64")
	}
	if b, _ := base64Decode(raw); len(b) < 24 {
		return errors.New("the app webhook secret is too short: use at least 24 random bytes, base64-encoded")
	}
	return nil
}

// NewAppSender returns a sender signing with cfg.Secret.
func NewAppSender(cfg AppSenderConfig) (*AppSender, error) {
	if err := ParseAppSecret(cfg.Secret); err != nil {
		return nil, err
	}
	signer, err := standardwebhooks.NewWebhook(cfg.Secret)
	if err != nil {
		return nil, errors.New("the app webhook secret is not whsec_<base64>")
	}
	return &AppSender{signer: signer, timeout: cmp.Or(cfg.Timeout, DefaultAppTimeout), client: &http.Client{
		Transport:     cmp.Or[http.RoundTripper](cfg.Transport, http.DefaultTransport),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// WebhookID is the webhook-id of a change: the same on every attempt and
// every endpoint, so the app can deduplicate.
func WebhookID(changeID int64) string { return "chg_" + strconv.FormatInt(changeID, 10) }

// Send makes one attempt of d.
func (s *AppSender) Send(ctx context.Context, d reconcile.AppDelivery) reconcile.AppDeliveryAttempt {
	start := time.Now()
	a := reconcile.AppDeliveryAttempt{At: start}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	id := WebhookID(d.ChangeID)
	sig, err := s.signer.Sign(id, start, d.Body)
	if err != nil {
		a.Error = "sign: " + err.Error()
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Endpoint, bytes.NewReader(d.Body))
	if err != nil {
		a.Error = "request: " + err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "billsync")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(start.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		a.Took = time.Since(start)
		a.Error = describeSendError(err)
		return a
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAppAnswerBytes))
	resp.Body.Close()
	a.Took = time.Since(start)
	a.StatusCode = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Error = "answered " + resp.Status
	}
	return a
}

// describeSendError says why no answer came, without the URL's query
// (which may carry an app's token).
func describeSendError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within the deadline"
	}
	return fmt.Sprintf("no answer: %v", err)
}

func base64Decode(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(s)
}
