//! Drift: whether a node launched earlier still matches its NodeClass.

/// The image changed.
pub const IMAGE_DRIFTED: &str = "ImageDrifted";
/// Other node-shaping parameters changed.
pub const NODE_CLASS_DRIFTED: &str = "NodeClassDrifted";

/// What a node recorded at launch; `None` where nothing was recorded (then that part cannot drift).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded<'a> {
    /// The parameters hash at launch.
    pub hash: Option<&'a str>,
    /// The image at launch.
    pub image: Option<&'a str>,
}

/// The drift reason, if any: an image change wins over other parameter changes.
pub fn reason(
    recorded: Recorded<'_>,
    current_hash: &str,
    current_image: &str,
) -> Option<&'static str> {
    if recorded.image.is_some_and(|image| image != current_image) {
        Some(IMAGE_DRIFTED)
    } else if recorded.hash.is_some_and(|hash| hash != current_hash) {
        Some(NODE_CLASS_DRIFTED)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_then_parameters() {
        let rec = Recorded {
            hash: Some("h1"),
            image: Some("i1"),
        };
        assert_eq!(reason(rec, "h1", "i1"), None);
        assert_eq!(reason(rec, "h1", "i2"), Some(IMAGE_DRIFTED));
        assert_eq!(reason(rec, "h2", "i2"), Some(IMAGE_DRIFTED));
        assert_eq!(reason(rec, "h2", "i1"), Some(NODE_CLASS_DRIFTED));
        assert_eq!(reason(Recorded::default(), "h2", "i2"), None);
    }
}
