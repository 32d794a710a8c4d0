package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

const appSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hmacSign is the specification's signature written out independently of
// any library: base64(HMAC-SHA256(key, id "." timestamp "." body)).
func hmacSign(t *testing.T, secret, id, ts string, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestHMACMatchesTheSpecVector: the independent signer reproduces the
// specification's published example, so it can judge billsync's.
func TestHMACMatchesTheSpecVector(t *testing.T) {
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		hmacSign(t, appSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`)))
}

type captured struct {
	header http.Header
	body   []byte
}

// capture is an app endpoint that records each request and answers code.
func capture(code int, got chan<- captured) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- captured{r.Header.Clone(), b}
		w.WriteHeader(code)
	})
}

func newSender(t *testing.T, h http.Handler) *server.AppSender {
	t.Helper()
	s, err := server.NewAppSender(server.AppSenderConfig{Secret: appSecret, Transport: inproc.Transport{Handler: h}})
	require.NoError(t, err)
	return s
}

var delivery = reconcile.AppDelivery{ChangeID: 42, Endpoint: "http://app.test/hooks/billing", AccountID: 7, Seq: 3,
	Body: []byte(`{"id":42,"type":"account.updated","seq":3}`)}

// TestAppSignature: the Standard Webhooks library's verifier and the
// independent HMAC both accept what billsync sends; a tampered body, a
// wrong secret or a timestamp past the tolerance are refused.
func TestAppSignature(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan captured, 2)
		s := newSender(t, capture(http.StatusNoContent, got))
		a := s.Send(context.Background(), delivery)
		require.Equal(t, http.StatusNoContent, a.StatusCode)
		require.Empty(t, a.Error)
		c := <-got
		require.Equal(t, "chg_42", c.header.Get("webhook-id"))
		require.Equal(t, strconv.FormatInt(time.Now().Unix(), 10), c.header.Get("webhook-timestamp"))
		require.Equal(t, delivery.Body, c.body)
		require.Equal(t, hmacSign(t, appSecret, "chg_42", c.header.Get("webhook-timestamp"), c.body), c.header.Get("webhook-signature"))

		wh, err := standardwebhooks.NewWebhook(appSecret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(c.body, c.header))
		tampered := append([]byte{}, c.body...)
		tampered[len(tampered)-2] = '4'
		require.ErrorIs(t, wh.Verify(tampered, c.header), standardwebhooks.ErrNoMatchingSignature)
		other, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 24 bytes")))
		require.NoError(t, err)
		require.ErrorIs(t, other.Verify(c.body, c.header), standardwebhooks.ErrNoMatchingSignature)

		// The same change again: the same id, a fresh timestamp and signature.
		time.Sleep(6 * time.Minute)
		require.ErrorIs(t, wh.Verify(c.body, c.header), standardwebhooks.ErrMessageTooOld, "a replay past the tolerance")
		s.Send(context.Background(), delivery)
		again := <-got
		require.Equal(t, "chg_42", again.header.Get("webhook-id"))
		require.NoError(t, wh.Verify(again.body, again.header))
	})
}

// TestAppSenderHygiene: redirects are not followed, a slow app is cut at
// the deadline, and a failed attempt says why without the app's body.
func TestAppSenderHygiene(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		followed := 0
		mux := http.NewServeMux()
		mux.HandleFunc("/hooks/billing", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		})
		mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { followed++ })
		a := newSender(t, mux).Send(context.Background(), delivery)
		require.Equal(t, http.StatusFound, a.StatusCode)
		require.Equal(t, "answered 302 Found", a.Error)
		require.Zero(t, followed, "no redirect followed")

		secret := "a secret the app leaks in its error page"
		a = newSender(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, secret, http.StatusInternalServerError)
		})).Send(context.Background(), delivery)
		require.Equal(t, 500, a.StatusCode)
		require.NotContains(t, a.Error, secret)

		a = newSender(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})).Send(context.Background(), delivery)
		require.Zero(t, a.StatusCode)
		require.Equal(t, "no answer within the deadline", a.Error)
		require.Equal(t, server.DefaultAppTimeout, a.Took, "cut at the deadline, exactly (fake clock)")
	})
}

func TestAppSecretChecked(t *testing.T) {
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="} {
		err := server.ParseAppSecret(bad)
		require.Error(t, err, bad)
		if bad != "" {
			require.NotContains(t, err.Error(), strings.TrimPrefix(bad, "whsec_"), "the secret is never quoted")
		}
	}
	require.NoError(t, server.ParseAppSecret(appSecret))
}
