module github.com/mcpmux/mcpmux

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/hashicorp/go-multierror v1.1.1
	github.com/mark3labs/mcp-go v1.2.1
)

require (
	github.com/google/jsonschema-go v0.4.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	github.com/spf13/cast v1.7.1 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	golang.org/x/text v0.42.0 // indirect
)
