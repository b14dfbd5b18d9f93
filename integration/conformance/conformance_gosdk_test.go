//go:build unix

package conformance

// goSDKFlakyScenarios are the scenarios measured to fail intermittently
// against the go-sdk everything-server directly, which the parity test would
// retry like mcp-go's: none. Measured with conformance 0.2.0-alpha.12 and
// go-sdk v1.8.0, every selection (each spec version, and none), both modes:
// 20 rounds of the CLI back to back plus 6 whole parity runs with
// VIEWMUX_CONFORMANCE_RETRIES=0 (two upstreams at a time on 2 busy cores),
// 26 runs of each of the 166 (selection, scenario) pairs per mode; every
// pair passed every time or failed every time. Re-measure the same way after
// changing a pin before adding a name here.
func goSDKFlakyScenarios() map[string]bool {
	return nil
}
