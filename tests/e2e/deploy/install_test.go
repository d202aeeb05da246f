package deploy

import "testing"

// A kept cluster's second run must take a deployed release for installed,
// and must not paper over a release an earlier run left broken.
func TestReleaseDeployed(t *testing.T) {
	for _, tc := range []struct {
		status  string
		want    bool
		wantErr bool
	}{
		{`{"name":"pillar-csi","info":{"status":"deployed"}}`, true, false},
		{`{"name":"pillar-csi","info":{"status":"failed"}}`, false, true},
		{`{"name":"pillar-csi","info":{"status":"pending-install"}}`, false, true},
		{`not json`, false, true},
	} {
		got, err := releaseDeployed([]byte(tc.status))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("releaseDeployed(%s) = %v, %v; want %v, error %v", tc.status, got, err, tc.want, tc.wantErr)
		}
	}
}
