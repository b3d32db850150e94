module go.bytecodealliance.org/pkg

go 1.27.1
