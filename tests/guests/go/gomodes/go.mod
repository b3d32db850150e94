module gomodes

go 1.27.1

require (
	go.bytecodealliance.org/pkg v0.0.0
	skillhost.dev/sdk v0.0.0
)

// `skillhost skill build` writes the SDK and the component-model runtime it needs here, so
// no module proxy is needed.
replace (
	go.bytecodealliance.org/pkg => ./.skillhost-build/go/pkg
	skillhost.dev/sdk => ./.skillhost-build/go/sdk
)
