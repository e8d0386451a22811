//! The few messages of etcd's v3 gRPC API (`etcdserverpb`, `mvccpb`) this backend sends and
//! reads, written out with their field numbers from etcd's `rpc.proto` and `kv.proto`.
//!
//! The v3 API is frozen: fields are only ever added, never renumbered, so this subset speaks to
//! every etcd since 3.4. Writing it out (rather than generating it from the `.proto` files at
//! build time) spares users a `protoc` install. Fields this backend never uses are left out;
//! protobuf decoding skips them.

#![allow(clippy::derive_partial_eq_without_eq)]

/// The gRPC method paths.
pub(crate) mod path {
    pub const RANGE: &str = "/etcdserverpb.KV/Range";
    pub const PUT: &str = "/etcdserverpb.KV/Put";
    pub const DELETE_RANGE: &str = "/etcdserverpb.KV/DeleteRange";
    pub const TXN: &str = "/etcdserverpb.KV/Txn";
    pub const WATCH: &str = "/etcdserverpb.Watch/Watch";
    pub const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
    pub const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";
    pub const LEASE_KEEP_ALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
    pub const LEASE_TIME_TO_LIVE: &str = "/etcdserverpb.Lease/LeaseTimeToLive";
    pub const STATUS: &str = "/etcdserverpb.Maintenance/Status";
    pub const AUTHENTICATE: &str = "/etcdserverpb.Auth/Authenticate";
    pub const USER_GET: &str = "/etcdserverpb.Auth/UserGet";
    pub const ROLE_GET: &str = "/etcdserverpb.Auth/RoleGet";
}

/// `AuthenticateRequest`: a user's name and password for a token.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthenticateResponse {
    /// Sent with every request as the `token` metadata.
    #[prost(string, tag = "2")]
    pub token: String,
}

/// `AuthUserGetRequest` (`distlock check`: the roles of the URL's user; a user may read its
/// own).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthUserGetRequest {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthUserGetResponse {
    #[prost(string, repeated, tag = "2")]
    pub roles: Vec<String>,
}

/// `AuthRoleGetRequest` (`distlock check`: a role's key ranges; a user may read its own
/// roles').
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthRoleGetRequest {
    #[prost(string, tag = "1")]
    pub role: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthRoleGetResponse {
    #[prost(message, repeated, tag = "2")]
    pub perm: Vec<Permission>,
}

/// `authpb.Permission`: a role's right over a key (`range_end` empty), a range, or every key
/// from `key` on (`range_end` = `\0`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Permission {
    /// `READ` 0, `WRITE` 1, `READWRITE` 2.
    #[prost(int32, tag = "1")]
    pub perm_type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub range_end: Vec<u8>,
}

/// `Permission::perm_type`s.
pub(crate) const PERM_READ: i32 = 0;
pub(crate) const PERM_WRITE: i32 = 1;
pub(crate) const PERM_READWRITE: i32 = 2;

/// `LeaseTimeToLiveRequest` (admin API: a holder's remaining lease).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseTimeToLiveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseTimeToLiveResponse {
    /// Seconds left; -1 when the lease has expired.
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

/// `StatusRequest` (admin API: the member's version).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StatusResponse {
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `RangeRequest.SortOrder`.
pub(crate) const ASCEND: i32 = 1;
pub(crate) const DESCEND: i32 = 2;
/// `RangeRequest.SortTarget` `CREATE`.
pub(crate) const SORT_BY_CREATE: i32 = 2;
/// `Compare.CompareTarget` `CREATE`.
pub(crate) const COMPARE_CREATE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub limit: i64,
    #[prost(int32, tag = "5")]
    pub sort_order: i32,
    #[prost(int32, tag = "6")]
    pub sort_target: i32,
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
    #[prost(int64, tag = "13")]
    pub max_create_revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PutResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DeleteRangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub deleted: i64,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum RequestUnion {
    #[prost(message, tag = "1")]
    Range(RangeRequest),
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeRequest),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RequestOp {
    #[prost(oneof = "RequestUnion", tags = "1, 2, 3")]
    pub request: Option<RequestUnion>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Response {
    #[prost(message, tag = "1")]
    Range(RangeResponse),
    #[prost(message, tag = "2")]
    Put(PutResponse),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeResponse),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseOp {
    #[prost(oneof = "Response", tags = "1, 2, 3")]
    pub response: Option<Response>,
}

/// `Compare.CompareResult` `EQUAL`.
pub(crate) const EQUAL: i32 = 0;

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum CompareWith {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Compare {
    #[prost(int32, tag = "1")]
    pub result: i32,
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    #[prost(oneof = "CompareWith", tags = "5")]
    pub target_union: Option<CompareWith>,
    /// With a range end, the comparison holds for every key in `[key, range_end)` — and, for
    /// an empty range, for a key that does not exist (`CREATE == 0`: the range is empty).
    #[prost(bytes = "vec", tag = "64")]
    pub range_end: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
    #[prost(int32, repeated, tag = "5")]
    pub filters: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum WatchRequestUnion {
    #[prost(message, tag = "1")]
    Create(WatchCreateRequest),
    #[prost(message, tag = "2")]
    Cancel(WatchCancelRequest),
}

/// Ends one watch of a stream that carries several.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchCancelRequest {
    #[prost(int64, tag = "1")]
    pub watch_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchRequest {
    #[prost(oneof = "WatchRequestUnion", tags = "1, 2")]
    pub request_union: Option<WatchRequestUnion>,
}

/// `WatchCreateRequest.FilterType` `NOPUT`: no put events.
pub(crate) const NOPUT: i32 = 0;

/// `WatchCreateRequest.FilterType` `NODELETE`: no delete events.
pub(crate) const NODELETE: i32 = 1;

/// `mvccpb.Event.EventType` `DELETE`.
pub(crate) const DELETE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Event {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseRevokeResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

/// The compare of a transaction that puts `key` only if it does not exist (its create
/// revision is 0).
pub(crate) fn absent(key: Vec<u8>) -> Compare {
    Compare {
        result: EQUAL,
        target: COMPARE_CREATE,
        key,
        target_union: Some(CompareWith::CreateRevision(0)),
        range_end: Vec::new(),
    }
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`): the
/// prefix with its last byte below 0xff incremented and what follows it dropped.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key from `prefix` on
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/b/"), b"a/b0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    /// Field numbers as in etcd's `rpc.proto`: a put inside a transaction.
    #[test]
    fn a_txn_encodes_with_etcds_field_numbers() {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: EQUAL,
                target: COMPARE_CREATE,
                key: b"k".to_vec(),
                target_union: Some(CompareWith::CreateRevision(0)),
                range_end: Vec::new(),
            }],
            success: vec![RequestOp {
                request: Some(RequestUnion::Put(PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    lease: 7,
                })),
            }],
            failure: vec![],
        };
        let bytes = txn.encode_to_vec();
        assert_eq!(
            bytes,
            [
                0x0a, 0x07, // compare (1), 7 bytes
                0x10, 0x01, // target (2) = CREATE
                0x1a, 0x01, b'k', // key (3)
                0x28, 0x00, // create_revision (5) = 0
                0x12, 0x0a, // success (2), 10 bytes
                0x12, 0x08, // request_put (2), 8 bytes
                0x0a, 0x01, b'k', // key (1)
                0x12, 0x01, b'v', // value (2)
                0x18, 0x07, // lease (3) = 7
            ]
        );
        assert_eq!(TxnRequest::decode(bytes.as_slice()).unwrap(), txn);
    }
}
