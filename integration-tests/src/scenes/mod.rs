//! Set-ups that several test files of one lock kind share: a test file
//! holds one concern, and the scene it starts from lives here.

pub mod election;
pub mod fair;
pub mod lease;
pub mod wakeup;
