package check

// The words each row checks, quoted from draft-ietf-httpapi-idempotency-key-header
// revision 07 (cited by section title), Stripe's API reference page
// "Idempotent requests", and RFC 8941 (Structured Field Values for HTTP).
const (
	srcMissing = `draft-07 "Error Handling": "If the Idempotency-Key request header is missing for a documented idempotent operation requiring this header, the resource SHOULD reply with an HTTP 400 status code"`

	srcFirst = `draft-07 "Idempotency Enforcement": "First time request (idempotency key and fingerprint has not been seen) The resource SHOULD process the request normally and respond with an appropriate response and status code."`

	srcReplay = `draft-07 "Idempotency Enforcement": "The resource SHOULD respond with the result of the previously completed operation, success or an error."; Stripe: "Subsequent requests with the same key return the same result"`

	srcReplayHeaders = `draft-07 "Idempotency Enforcement": "respond with the result of the previously completed operation"; Stripe saves "the resulting status code and body of the first request"`

	srcMarker = `not in the draft nor in Stripe's text: a marker such as Idempotent-Replayed: true is how a client tells a replay from a first execution; its absence is a WARN`

	srcEffect = `Stripe: "you can safely repeat the request without risk of creating a second object or performing the update twice"`

	srcMismatch = `draft-07 "Error Handling": "If there is an attempt to reuse an idempotency key with a different request payload, the resource SHOULD reply with a HTTP 422 status code"; Stripe: "The idempotency layer compares incoming parameters to those of the original request and errors if they're not the same"`

	srcConcurrent = `draft-07 "Error Handling": "If the request is retried, while the original request is still being processed, the resource SHOULD reply with an HTTP 409 status code"; RFC 7240: Prefer: wait bounds how long the client wants to wait`

	src5xx = `Stripe: "Subsequent requests with the same key return the same result, including 500 errors." (a stored 5xx is the server's choice: WARN); draft-07 "Error Handling": "For other 4xx/5xx errors ... the client SHOULD act appropriately by following the resource's documentation"`

	srcScope = `draft-07 "Security Considerations": "implement a unique composite key as the idempotent cache lookup key ... combining the idempotency key sent by the client with other client specific attributes known only to the resource"; it warns of keys used "to fetch existing idempotent cache entries, belonging to other clients"`

	srcInvalid = `draft-07 "Security Considerations": "Always validate the key as per its published specification before processing any request."; draft-07 "Syntax": "Its value MUST be a String (Section 3.3.3 of RFC8941)"`

	srcTooLong = `Stripe: "Idempotency keys are up to 255 characters long."; draft-07 "Security Considerations": "Always validate the key as per its published specification before processing any request."`

	srcNonASCII = `RFC 8941 §3.3.3: "Strings are zero or more printable ASCII characters (i.e., the range %x20 to %x7E)"; draft-07 "Syntax": "Its value MUST be a String"`

	srcTwoLines = `RFC 8941 §4.2: parsers "MUST combine all field lines in the same section ... into one comma-separated field value", which is no longer one String; draft-07 "Syntax": "Idempotency-Key is an Item Structured Header"`

	srcQuoted = `draft-07 "Uniqueness of Idempotency Key": "Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"" (the key is a Structured Field String, in double quotes)`

	srcQuotedRaw = `draft-07 "Syntax": the value "MUST be a String" (the quoted form); Stripe and most servers read the raw form: a server reading both as one key lets a client switch form without a second execution`

	srcExpiry = `draft-07 "Idempotency Key Validity and Expiry": "The resource SHOULD define such expiration policy and publish it in the documentation."; Stripe: "We generate a new request if a key is reused after the original is pruned."`

	srcChaos = `draft-07 "Introduction": "The client is left uncertain about the status of the resource ... the client does not know if it can safely retry the request."; Stripe: "if a connection error occurs, you can safely repeat the request without risk of creating a second object or performing the update twice"`

	// The rows below are where idem reads the draft more strictly than its
	// words require; each says so.

	srcMismatchOriginal = `Stripe: "The idempotency layer compares incoming parameters to those of the original request and errors if they're not the same to prevent accidental misuse", and "Subsequent requests with the same key return the same result"; draft-07 "Idempotency Enforcement": the resource "SHOULD respond with the result of the previously completed operation" (the refusal of another body changes nothing of the original's record)`

	srcFingerprintFields = `idem's stricter reading: Stripe "compares incoming parameters to those of the original request and errors if they're not the same"; draft-07 "Idempotency Fingerprint" also lets a fingerprint cover only "selected element(s) in the request payload", which this row refuses: a field the fingerprint ignores lets a changed request get the first answer, and the change is silently dropped`

	srcFingerprintQuery = `idem's stricter reading: the query is part of the request's target (RFC 9110 §7.1), and Stripe "compares incoming parameters to those of the original request"; draft-07 "Idempotency Fingerprint" speaks of the payload only`

	srcReplayAfter = `draft-07 "Idempotency Key Validity and Expiry": "The resource SHOULD define such expiration policy and publish it in the documentation."; Stripe: "Keys are eligible to be removed from the system automatically after they're at least 24 hours old" (a record is kept for the time published)`

	srcRetention = `draft-07 "Idempotency Key Validity and Expiry": "The resource SHOULD define such expiration policy and publish it in the documentation."; Stripe: keys are removed "after they're at least 24 hours old"; idem's stricter reading: the record replays at every time within the published retention, not only at its start`

	srcLease = `draft-07 "Error Handling": "If the request is retried, while the original request is still being processed, the resource SHOULD reply with an HTTP 409 status code"; idem's stricter reading: for the whole of the handler's run, however long, so a lock or lease that expires under a handler still running must not let a duplicate execute`

	srcPreferWait = `RFC 7240 §4.3: "the wait preference can be used to establish an upper bound on the length of time, in seconds, the client expects it will take the server to process the request once it has been received"; RFC 7240 §2: behaviours "preferred by the client but ... not required for successful completion of the request", "servers are allowed to ignore stated preferences" (a wait past it is a WARN, a FAIL only with -strict); draft-07 "Error Handling": a retry while the original is processed gets 409; judged against how long the handler really ran after the duplicate was sent`

	srcTwoValidLines = `idem's stricter reading: RFC 8941 §4.2 combines the lines into one value ("k1, k2"), which is no String, and draft-07 "Syntax" makes Idempotency-Key an Item; a server that picks one line silently runs the operation again when a retry carries the other`
)
