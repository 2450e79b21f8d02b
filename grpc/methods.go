package idemgrpc

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// method is what the registered descriptor of a gRPC method says of it.
type method struct {
	// repeatable: its idempotency_level is IDEMPOTENT or NO_SIDE_EFFECTS, so
	// a call may be repeated without a key.
	repeatable bool
	// output is the descriptor of its response message, nil when the method
	// is not registered (a replay then cannot build the response).
	output protoreflect.MessageDescriptor
}

// methods caches what the descriptors say of the methods called, by full
// method name ("/pkg.Service/Method"); descriptors are registered at init, so
// an entry never changes.
type methods struct {
	files *protoregistry.Files // nil: protoregistry.GlobalFiles
	cache sync.Map             // full method name -> method
}

// lookup returns what the registry says of fullMethod. A method it does not
// know (no descriptor registered, a malformed name) is neither repeatable nor
// replayable: the safe reading of a method nobody described.
func (ms *methods) lookup(fullMethod string) method {
	if m, ok := ms.cache.Load(fullMethod); ok {
		return m.(method)
	}
	m := ms.describe(fullMethod)
	ms.cache.Store(fullMethod, m)
	return m
}

func (ms *methods) describe(fullMethod string) method {
	files := ms.files
	if files == nil {
		files = protoregistry.GlobalFiles
	}
	svc, name, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok || svc == "" || name == "" {
		return method{}
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return method{}
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return method{}
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return method{}
	}
	m := method{output: md.Output()}
	if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok {
		switch opts.GetIdempotencyLevel() {
		case descriptorpb.MethodOptions_IDEMPOTENT, descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
			m.repeatable = true
		}
	}
	return m
}
