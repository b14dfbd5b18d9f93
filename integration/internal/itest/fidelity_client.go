//go:build unix

package itest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// FidStatusRow is one upstream's row of viewmux's /status.json.
type FidStatusRow struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Connects int    `json:"connects"`
	Restarts int    `json:"restarts"`
}

// FidStatus reads upstream name's row from mux's /status.json.
func FidStatus(mux *Mux, name string) (FidStatusRow, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + mux.Addr + "/status.json")
	if err != nil {
		return FidStatusRow{}, err
	}
	defer resp.Body.Close()
	var st struct {
		Upstreams []FidStatusRow `json:"upstreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return FidStatusRow{}, fmt.Errorf("/status.json: %s: %w", resp.Status, err)
	}
	for _, r := range st.Upstreams {
		if r.Name == name {
			return r, nil
		}
	}
	return FidStatusRow{}, fmt.Errorf("/status.json has no upstream %q", name)
}
