"""What every suite shares: free ports, cloned databases, and the live board harness."""
