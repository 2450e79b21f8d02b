// Package idemgrpctest is a small gRPC service for the tests, demos and
// benchmarks of idem over gRPC: idem.demo.v1.Payments, whose methods take and
// return a google.protobuf.StringValue, with its descriptor registered (as
// generated code registers one), so that the interceptors read each method's
// idempotency_level from it:
//
//	Charge  no idempotency_level: a call needs a key to be retried, and the server protects it
//	Get     NO_SIDE_EFFECTS: retried without a key, not protected
//	Put     IDEMPOTENT: retried without a key, not protected
//
// The service is built without protoc: its descriptor is written out here.
package idemgrpctest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The service and its methods' full names.
const (
	Service = "idem.demo.v1.Payments"
	Charge  = "/" + Service + "/Charge"
	Get     = "/" + Service + "/Get"
	Put     = "/" + Service + "/Put"
)

func init() {
	str := ".google.protobuf.StringValue"
	m := func(name string, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		d := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: &str, OutputType: &str}
		if level != descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			d.Options = &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()}
		}
		return d
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("idem/demo/v1/payments.proto"),
		Package:    proto.String("idem.demo.v1"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Payments"),
			Method: []*descriptorpb.MethodDescriptorProto{
				m("Charge", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
				m("Get", descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
				m("Put", descriptorpb.MethodOptions_IDEMPOTENT),
			},
		}},
	}
	_ = wrapperspb.String("") // the dependency's descriptor is registered by wrapperspb's init
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic("idemgrpctest: " + err.Error())
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic("idemgrpctest: " + err.Error())
	}
}

// Handler serves one call of a method of the service (its full name).
type Handler func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// Register registers the service on s, served by h.
func Register(s grpc.ServiceRegistrar, h Handler) {
	desc := grpc.ServiceDesc{ServiceName: Service, HandlerType: (*any)(nil), Metadata: "idem/demo/v1/payments.proto"}
	for _, name := range []string{"Charge", "Get", "Put"} {
		full := "/" + Service + "/" + name
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				run := func(ctx context.Context, req any) (any, error) { return h(ctx, full, req.(*wrapperspb.StringValue)) }
				if icpt == nil {
					return run(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{Server: h, FullMethod: full}, run)
			}})
	}
	s.RegisterService(&desc, h)
}

// Call calls method with in and returns the answer's value.
func Call(ctx context.Context, cc grpc.ClientConnInterface, method, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, method, wrapperspb.String(in), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// Echo is a Handler that answers every call with its request's value.
func Echo(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(in.GetValue()), nil
}
