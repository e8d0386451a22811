//! Statement parameters encoded before the statement is sent, so that a statement behind a
//! transaction pooler can be finished without its caller (see `pool::Conn::alone`).

use bytes::{Bytes, BytesMut};
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// A parameter encoded before its statement is sent, so the statement can finish without its
/// caller (see `pool::Conn::alone`): written as it was encoded.
#[derive(Debug)]
pub(super) struct Encoded(Option<Bytes>);

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        true // checked when it was encoded
    }

    to_sql_checked!();
}

/// `params` encoded as `types` say; `None` if one does not encode (the driver then says why).
pub(super) fn encode(types: &[Type], params: &[&(dyn ToSql + Sync)]) -> Option<Vec<Encoded>> {
    params
        .iter()
        .zip(types)
        .map(|(param, ty)| {
            let mut out = BytesMut::new();
            match param.to_sql_checked(ty, &mut out).ok()? {
                IsNull::No => Some(Encoded(Some(out.freeze()))),
                IsNull::Yes => Some(Encoded(None)),
            }
        })
        .collect()
}
