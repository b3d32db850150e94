module skillhost.dev/sdk

go 1.27.1

require go.bytecodealliance.org/pkg v0.0.0
