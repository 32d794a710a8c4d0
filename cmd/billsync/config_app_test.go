package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
)

// TestAppWebhookSettings: the app's endpoints, secret and allowlist are
// checked at start, every mistake named, the secret never quoted.
func TestAppWebhookSettings(t *testing.T) {
	const good = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for _, tc := range []struct {
		name  string
		c     config
		wants []string
	}{
		{"Off", config{}, nil},
		{"OK", config{Config: app.Config{AppWebhookURLs: []string{"https://app.example/hooks", "http://10.0.0.2:8080/h"}, AppWebhookSecret: good}}, nil},
		{"Allowed", config{Config: app.Config{AppWebhookURLs: []string{"https://app.example/hooks"}, AppWebhookSecret: good}, AppWebhookAllowHosts: []string{"app.example"}}, nil},
		{"NoSecret", config{Config: app.Config{AppWebhookURLs: []string{"https://app.example/hooks"}}}, []string{"BILLSYNC_APP_WEBHOOK_SECRET is not"}},
		{"SecretWithoutURL", config{Config: app.Config{AppWebhookSecret: good}}, []string{"BILLSYNC_APP_WEBHOOK_URL is not"}},
		{"NotWhsec", config{Config: app.Config{AppWebhookURLs: []string{"https://app.example/h"}, AppWebhookSecret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, []string{"whsec_<base64>"}},
		{"BadURLs", config{Config: app.Config{AppWebhookURLs: []string{"ftp://x", "https://", "https://u:p@app.example/h", "::"}, AppWebhookSecret: good}},
			[]string{`"ftp://x"`, `"https://"`, "user:password", `"::"`}},
		{"NotAllowed", config{Config: app.Config{AppWebhookURLs: []string{"https://evil.example/h"}, AppWebhookSecret: good}, AppWebhookAllowHosts: []string{"app.example"}},
			[]string{`host "evil.example" is not in BILLSYNC_APP_WEBHOOK_ALLOW_HOSTS`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errors.Join(tc.c.validateAppWebhooks()...)
			if tc.wants == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.wants {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "the secret is never quoted")
		})
	}
	require.Equal(t, []string{"a", "b"}, commaList(" a, ,b ,"))
}
